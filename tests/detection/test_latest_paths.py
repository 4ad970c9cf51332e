"""The ``openclaw-latest`` profile around the engine: off changes nothing, every path decides alike,
stored states stay compatible, and the profile is configured like every extension."""

from __future__ import annotations

import json

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwarden.detection import decode_state, encode_state, step
from loopwarden.detection.canonical import digest_decoded
from loopwarden.detection.latest_hashing import call_digest, outcome_digest
from loopwarden.detection.state import History, RecordExtras, RunState
from loopwarden.replay import replay_lines
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.config_check import check_document, format_report
from loopwarden.schemas.events import decode_event, state_key
from loopwarden.schemas.extensions import DEFAULT_EXTENSIONS, Extensions, resolve_extensions
from loopwarden.worker.batch import Limits, apply_batch
from loopwarden.worker.runcodec import RunValue, decode_value, encode_value
from tests.support.helpers import Rec

PROFILE = {"profile": "openclaw-latest", "writeChurn": True}  # every path, upstream's write churn included
LIMITS = Limits(control_topic="ctl", shadow_topic="shd", dead_letter_topic="dlq")
VETO = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}

# ---------------------------------------------------------------- generated traces

TOOLS = st.sampled_from(["read", "exec", "write", "command_status", "search"])
PARAMS = st.sampled_from(
    [{}, {"q": "a"}, {"q": "b"}, {"path": "p", "content": 1}, {"path": "p", "content": 2}, {"command": "c"}]
)
RESULTS = st.sampled_from(
    [
        "same",
        "other",
        {"details": {"changed": True}},
        {"details": {"changed": False}},
        {"details": {"status": "failed", "exitCode": 1, "aggregated": "refused at 10:00:01"}},
        {"details": {"status": "failed", "exitCode": 1, "aggregated": "refused at 10:00:02"}},
        VETO,
    ]
)


@st.composite
def traces(draw):
    """Events of two runs of one agent: calls, results (or errors, or none), compactions, run ends."""
    events = []
    for i in range(draw(st.integers(1, 60))):
        run = draw(st.sampled_from(["r1", "r2"]))
        tool, params = draw(TOOLS), draw(PARAMS)
        cid = draw(st.sampled_from([None, f"c{i}", "dup"]))
        base = {"agent_id": "a", "run_id": run, "tool_name": tool, "params": params}
        if cid is not None:
            base["tool_call_id"] = cid
        events.append({"type": "tool_call", **base, **draw(st.sampled_from([{}, {"cwd": "/w"}]))})
        kind = draw(st.sampled_from(["result", "result", "error", "none", "compaction", "end"]))
        if kind == "result":
            events.append({"type": "tool_result", **base, "result": draw(RESULTS)})
        elif kind == "error":
            events.append({"type": "tool_result", **base, "error": draw(st.sampled_from(["E", "Unknown tool: x"]))})
        elif kind == "compaction":
            events.append({"type": "compaction_retry", "agent_id": "a", "run_id": run})
        elif kind == "end":
            events.append({"type": "run_end", "agent_id": "a", "run_id": run})
    # repeat the trace's start so loops form
    return events + events[: draw(st.integers(0, len(events)))] * 2


def run_through(events, config, ext) -> tuple[list, dict]:
    states: dict = {}
    out = []
    for raw in events:
        ev = decode_event(json.dumps(raw))
        key = state_key(ev)
        res = step(states.get(key), ev, config, ext=ext)
        if res.state is None:
            states.pop(key, None)
        else:
            states[key] = res.state
        out.append([msgspec.to_builtins(d) for d in res.detections])
    return out, {k: encode_state(s) for k, s in states.items()}


CONFIG = FleetConfig({"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}).resolve("a")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(traces(), st.sampled_from([{}, {"profile": None}, {"shadow": ["ping_pong"]}]))
def test_property_profile_off_changes_nothing(events, block):
    """Profile key absent, explicitly null, or no extension block at all: identical detections and stored bytes."""
    baseline = run_through(events, CONFIG, None)
    assert run_through(events, CONFIG, DEFAULT_EXTENSIONS) == baseline
    ext = FleetConfig.from_document({"tools": {"loopDetection": {}}, "loopwarden": block}).extensions("a")
    assert ext.profile is None
    if not ext.shadow:
        assert run_through(events, CONFIG, ext) == baseline
    assert run_through(events, CONFIG, Extensions(profile=None, shadow=ext.shadow)) == run_through(events, CONFIG, ext)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(traces())
def test_property_profile_on_takes_any_trace_and_its_states_round_trip(events):
    ext = Extensions(profile="openclaw-latest")
    states: dict = {}
    for raw in events:
        ev = decode_event(json.dumps(raw))
        key = state_key(ev)
        before = states.get(key)
        if before is not None:  # through the stored form, as a worker does between batches
            before = decode_state(encode_state(before))
        res = step(before, ev, CONFIG, ext=ext)
        if res.state is None:
            states.pop(key, None)
            continue
        states[key] = res.state
        h = res.state.history
        x = res.state.extras
        assert x is not None and len(h) <= 30
        assert len(x.targets) == len(x.kinds) == len(x.identities) == len(x.no_progress) == len(h)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(traces())
def test_property_the_decisions_shortcut_changes_no_verdict(events):
    from loopwarden.detection import latest
    from loopwarden.detection.latest_hashing import LATEST_HASHER, mutation_target

    ext = Extensions(profile="openclaw-latest")
    states: dict = {}
    for raw in events:
        ev = decode_event(json.dumps(raw))
        key = state_key(ev)
        state = states.get(key)
        if raw["type"] == "tool_call" and state is not None:
            info = LATEST_HASHER.call_info(ev.tool_name, json.dumps(raw["params"]).encode())
            args = (state.history, latest.extras(state), ev.tool_name, info.sig, info.known_poll)
            target = mutation_target(info.path, ev.cwd)
            assert latest.decide(*args, target) == latest.decide(*args, target, quick=False)
        res = step(state, ev, CONFIG, ext=ext)
        if res.state is None:
            states.pop(key, None)
        else:
            states[key] = res.state


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(alphabet=st.characters(max_codepoint=0xFFFF)),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c, max_size=4),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_property_profile_digests_equal_the_docs_revisions_without_surrogates_or_wrappers(value):
    text = json.dumps(value)
    if "\\ud8" in text or "\\ud9" in text or "\\uda" in text or "\\udb" in text or "\\udc" in text:
        return  # surrogates: the one serialization rule that differs
    if "\\udd" in text or "\\ude" in text or "\\udf" in text:
        return
    assert call_digest(value) == outcome_digest(value) == digest_decoded(value)


# ---------------------------------------------------------------- the worker's batch path = replay


def fleet() -> FleetConfig:
    return FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}, "loopwarden": PROFILE})


def profile_trace() -> list[dict]:
    """An obedient runner: blocked calls get the veto; churn, escalation and write churn."""
    events: list[dict] = []
    blocked: set[str] = set()

    def pair(i, tool, params, result=None, error=None, run="r1"):
        base = {"agent_id": "a", "run_id": run, "tool_name": tool, "tool_call_id": f"{run}-{i}", "params": params}
        events.append({"type": "tool_call", **base, "await_decision": True})
        out = {"type": "tool_result", **base}
        if error is not None:
            out["error"] = error
        else:
            out["result"] = result
        events.append(out)

    n = 0
    for q in ("a", "b") * 8:  # churn, then ping-pong with the liveness signal
        n += 1
        pair(n, "search", {"q": q}, error="E")
    for _ in range(34):  # escalation to the global breaker (vetoes from an obedient runner)
        n += 1
        pair(n, "read", {"p": 1}, result="same", run="r2")
    for i in range(12):  # write-mutation churn
        n += 1
        pair(n, "write", {"path": "f", "content": i}, result={"details": {"changed": True}}, run="r3")
    del blocked
    return events


def _obedient(events: list[dict], config: FleetConfig) -> list[dict]:
    """The trace with the results of the calls replay blocks turned into vetoes."""
    lines = [json.dumps(e) for e in events]
    rows = [r for r in replay_lines(lines, config) if isinstance(r, dict)]
    blocked = {r["event_index"] for r in rows if r["action"] == "block"}
    return [
        {**e, "result": VETO} if i - 1 in blocked and e["type"] == "tool_result" else e for i, e in enumerate(events)
    ]


def test_worker_batch_path_equals_replay_with_the_profile_on():
    config = fleet()
    events = _obedient(profile_trace(), config)
    rows = [r for r in replay_lines([json.dumps(e) for e in events], config) if isinstance(r, dict)]
    expected = [
        (r["event_index"], r["detector"], r["action"], r["count"], r["warning_key"], r.get("liveness_signal"))
        for r in rows
        if r["emitted"]
    ]
    detectors = {r["detector"] for r in rows}
    assert {"argument_churn", "ping_pong", "generic_repeat", "global_circuit_breaker"} <= detectors
    assert any(r.get("liveness_signal") == "argument_churn" and r["detector"] == "ping_pong" for r in rows)
    records = [Rec("ev", 0, i, e["run_id"].encode(), json.dumps(e).encode()) for i, e in enumerate(events)]
    res = apply_batch(records, lambda p, k: None, config, LIMITS)
    got = [json.loads(o.value) for o in res.outgoing if o.topic == "ctl"]
    got = [v for v in got if v["action"] != "allow"]
    assert [
        (
            int(v["verdict_id"].split(":")[2]),
            v["detector"],
            v["action"],
            v["count"],
            v["warning_key"],
            v.get("liveness_signal"),
        )
        for v in got
    ] == expected


def test_the_profile_changes_replays_verdicts_only_where_it_is_on():
    events = _obedient(profile_trace(), fleet())
    lines = [json.dumps(e) for e in events]
    doc = {"tools": {"loopDetection": {"enabled": True}}, "agents": {"list": [{"id": "a", "loopwarden": PROFILE}]}}
    per_agent = [r for r in replay_lines(lines, FleetConfig.from_document(doc)) if isinstance(r, dict)]
    assert [r for r in replay_lines(lines, fleet()) if isinstance(r, dict)] == per_agent
    doc["agents"]["list"][0]["loopwarden"] = {"profile": None}
    doc["loopwarden"] = PROFILE  # the agent opts out with null
    off = [r for r in replay_lines(lines, FleetConfig.from_document(doc)) if isinstance(r, dict)]
    assert "argument_churn" not in {r["detector"] for r in off}
    assert off == [
        r
        for r in replay_lines(lines, FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}}))
        if isinstance(r, dict)
    ]


def test_live_override_switches_the_profile():
    config = FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}})
    assert config.extensions("a").profile is None
    on = config.with_override("a", {"enabled": True}, PROFILE)
    assert on.extensions("a").profile == "openclaw-latest" and on.extensions("b").profile is None


def test_bad_profile_is_reported_and_ignored():
    ext, problems = resolve_extensions({"profile": "openclaw-2099"})
    assert ext.profile is None and problems == [
        "loopwarden.profile must be one of openclaw-latest or null: 'openclaw-2099' ignored"
    ]


# ---------------------------------------------------------------- stored state


def _legacy_history() -> list:
    return [["read"], ["read:x"], ["c1"], [None], [None]]  # a pending record: it keeps its call id


def test_a_history_without_the_profile_columns_stores_them_as_nil_and_older_values_still_decode():
    state = RunState(history=History(*_legacy_history()))
    assert state.extras is None
    legacy = [_legacy_history(), {}, [0, [], False], [], [], 0, 0, None, None]
    current = [_legacy_history(), {}, [0, [], False], [], b"", 0, 0, None, None]  # seen: digests (v3)
    # the stored format v4 (STATE.md): the version byte, then every slot, usage, extras and prints nil
    assert encode_state(state) == b"\x04" + msgspec.msgpack.encode([*current, None, None, None])
    value = RunValue(7, 1.5, state)
    assert encode_value(value) == b"\x04" + msgspec.msgpack.encode([7, 1.5, [*current, None, None, None]])
    assert decode_value(encode_value(value)) == value
    # a value written before the profile existed (v1, no version byte, no extras slot)
    assert decode_value(msgspec.msgpack.encode([7, 1.5, [*legacy, None]])) == value
    assert decode_state(msgspec.msgpack.encode(legacy)) == state


def test_a_state_stored_before_the_profile_decodes_and_the_profile_takes_it_up():
    config = FleetConfig({"enabled": True}).resolve("a")
    call = decode_event(json.dumps({"type": "tool_call", "agent_id": "a", "tool_name": "read", "params": {}}))
    state = None
    for _ in range(10):
        state = step(state, call, config).state
    raw = encode_state(state)
    assert decode_state(raw).extras is None
    res = step(decode_state(raw), call, config, ext=Extensions(profile="openclaw-latest"))
    assert [(d.detector, d.count) for d in res.detections] == [("generic_repeat", 10)]
    x = res.state.extras
    assert x == RecordExtras([None] * 11, [0] * 11, [None] * 11, [False] * 11)
    again = decode_state(encode_state(res.state))
    assert again == res.state and again.extras == x


def test_switching_the_profile_off_drops_its_columns_and_on_again_starts_them_blank():
    on = Extensions(profile="openclaw-latest", write_churn=True)
    small = FleetConfig({"enabled": True, "historySize": 40}).resolve("a")
    state = None
    for i in range(45):
        ext = on if i % 3 else None
        for raw in (
            {"type": "tool_call", "agent_id": "a", "tool_name": "write", "params": {"path": "p", "content": i}},
            {
                "type": "tool_result",
                "agent_id": "a",
                "tool_name": "write",
                "params": {"path": "p", "content": i},
                "result": {"details": {"changed": True}},
            },
        ):
            state = step(state, decode_event(json.dumps(raw)), small, ext=ext).state
        x, h = state.extras, state.history
        if ext is None:
            assert x is None
        else:
            assert len(x.kinds) == len(x.targets) == len(h) <= 30  # the profile's window, whatever was before
            assert x.kinds[-1] == 3 and x.targets[-1] is not None


def test_config_check_names_the_knobs_the_profile_ignores():
    block = {"enabled": True, "warningThreshold": 3, "historySize": 50, "postCompactionGuard": {"windowSize": 5}}
    doc = {
        "tools": {"loopDetection": block},
        "agents": {"list": [{"id": "on", "loopwarden": PROFILE}, {"id": "off", "tools": {"loopDetection": {}}}]},
    }
    report = check_document(doc)
    glob, on, off = report.blocks
    for b in (glob, off):
        assert not [n for n in b.notes if "profile" in n.text] and b.effective.warning_threshold == 3
    assert [n.key for n in on.notes if "profile" in n.text] == [
        "historySize",
        "warningThreshold",
        "postCompactionGuard.windowSize",
    ]
    doc["agents"]["list"][0]["tools"] = {"loopDetection": {"criticalThreshold": 2, "detectors": {"pingPong": 0}}}
    report = check_document(doc)
    on = next(b for b in report.blocks if b.agent_id == "on")
    assert [n.text for n in on.notes if "profile" in n.text] == [
        "historySize is ignored by profile openclaw-latest: 30",
        "warningThreshold is ignored by profile openclaw-latest: 10",
        "criticalThreshold is ignored by profile openclaw-latest: 20",
        "postCompactionGuard.windowSize is ignored by profile openclaw-latest: 3",
        "detectors is ignored by profile openclaw-latest: every detector on",
    ]
    others = [n for n in on.notes if "profile" not in n.text and n.key != "enabled" and "openclaw@" not in n.text]
    assert not others  # e.g. no "raised to 4"
    e = on.effective
    assert (e.history_size, e.warning_threshold, e.critical_threshold, e.guard_window, e.ping_pong) == (
        30,
        10,
        20,
        3,
        True,
    )
    assert "warningThreshold is ignored by profile openclaw-latest" in format_report(report)


def test_config_check_names_each_knob_the_release_rejects():
    """openclaw@2026.9.6 accepts only a boolean ``enabled`` under tools.loopDetection (its config validate
    fails on every other key) and records calls only when it is true: check names each, under the profile."""
    block = {"enabled": 1, "historySize": 50, "detectors": {"pingPong": False}, "recordCalls": False}
    doc = {"tools": {"loopDetection": block}, "agents": {"list": [{"id": "on", "loopwarden": PROFILE}]}}
    glob, on = check_document(doc).blocks
    assert not [n for n in glob.notes if "openclaw@" in n.text]  # without the profile: nothing said
    assert [n.text for n in on.notes if "openclaw@" in n.text] == [
        "enabled must be true or false for openclaw@2026.9.6",
        "historySize is rejected by openclaw@2026.9.6 (it accepts only enabled under tools.loopDetection)",
        "detectors is rejected by openclaw@2026.9.6 (it accepts only enabled under tools.loopDetection)",
        "recordCalls is rejected by openclaw@2026.9.6 (it accepts only enabled under tools.loopDetection)",
        "openclaw@2026.9.6 detects and records calls only when enabled is true",
    ]
    doc["tools"]["loopDetection"] = {"enabled": True}
    assert not [n for n in check_document(doc).blocks[1].notes if "openclaw@" in n.text]


def test_tune_decides_like_replay_with_the_profile_on_and_skips_no_run_it_could_flag():
    from loopwarden.tune import grid, prepare, tune

    events = _obedient(profile_trace(), fleet())
    lines = [json.dumps(e) for e in events]
    rows = [r for r in replay_lines(lines, fleet()) if isinstance(r, dict)]
    per_run = {}
    for r in rows:
        if r["action"] != "warn" or r["emitted"]:
            per_run.setdefault(r["action"], set()).add(r["run_id"])
    assert per_run["warn"] == {"r1", "r2", "r3"}  # r3: only write churn, no repeated signature, no error
    prep = prepare(lines, profile=True)
    assert len(prep.active) == len(prep.events)
    assert len(prepare(lines).active) < len(prep.events)  # without the hint r3 would be skipped
    (setting,) = tune(prep, fleet(), grid([])).settings
    f = setting.fleet
    assert (f.warned, f.blocked) == (len(per_run["warn"]), len(per_run["block"]))
    assert fleet().uses_profile() and not FleetConfig.from_document({"loopwarden": {"shadow": True}}).uses_profile()
