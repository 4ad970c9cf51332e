"""One decision, written once: the worker's batch path, replay and tune decide every event alike.

Each caller hands every event to :func:`loopwarden.detection.decision.decide_event` and only
names, publishes, prints or counts what it decided. The property test drives generated
traces (every event kind; repeated, missing and shared ids; interleaved runs and agents;
acks, compactions, run ends; runners that obey and runners that do not) under generated
configs (each extension on and off, per-agent overlays) through all three and compares
their verdicts, violations and escalation aborts verdict for verdict. The regression tests
pin the divergences the copies once had.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwarden import tune
from loopwarden.replay import replay_lines
from loopwarden.schemas.config import FleetConfig, parse_config_text
from loopwarden.schemas.events import decode_event
from loopwarden.worker.batch import Limits, apply_batch
from loopwarden.worker.runcodec import decode_value, encode_value
from tests.support.helpers import Rec

LIMITS = Limits(control_topic="ctl", shadow_topic="shd", dead_letter_topic="dlq")
TOPIC = "ev"
VETO = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}
DETECTION = {
    "enabled": True,
    "warningThreshold": 2,
    "criticalThreshold": 3,
    "globalCircuitBreakerThreshold": 4,
    "unknownToolThreshold": 2,
}

# -- the three callers, each reduced to the same rows ---------------------------------------------
# A row: (event index, what, n, detector or kind, action, level, count, shadow, message or verdict named).
# `what` is "verdict" (an emitted detection, enforced or shadowed), "violation", "escalation" or "allow";
# ``n`` the verdict's ordinal within its event (the last part of its verdict id).


def _ack_target(raw: str, prefix: str) -> str:
    """Acks in a generated trace name a verdict as ``@<event index>:<n>``; each caller names it its way."""
    return prefix + raw[1:] if raw.startswith("@") else raw


def trace_lines(events: list[dict], prefix: str) -> list[bytes]:
    out = []
    for e in events:
        if e["type"] == "verdict_ack":
            e = {**e, "verdict_id": _ack_target(e["verdict_id"], prefix)}
        out.append(json.dumps(e).encode())
    return out


def _det_row(index: int, what: str, n: int, det) -> tuple:
    return (index, what, n, det.detector, det.action, det.level, det.count, bool(det.shadow), det.message)


def _violation_row(index: int, kind: str, named: str | None) -> tuple:
    return (index, "violation", None, kind, None, None, None, False, named)


def _allow_row(index: int, n: int) -> tuple:
    return (index, "allow", n, None, "allow", None, None, False, None)


def worker_rows(events: list[dict], fleet: FleetConfig, batch: int = 1) -> list[tuple]:
    """The batch path in-process: records of one partition (offset = event index), batches of ``batch``,
    run values through the table's codec between batches. With a fleet-wide extension on, the fleet
    side runs in-process (replay's) and the run side sees its incident board, as the worker's does."""
    lines = trace_lines(events, f"{TOPIC}:0:")
    table: dict[tuple[int, bytes], bytes] = {}
    board = after_step = None
    if fleet.fleet_wide():
        from loopwarden.fleet.offline import FleetTrace

        side = FleetTrace(fleet)
        board = side.board

        def after_step(state_in, event, decision):
            side.after(state_in, event, decision)  # the fleet side's records: onto the board at once
            return []

    def read(p: int, k: bytes):
        raw = table.get((p, k))
        return decode_value(raw) if raw is not None else None

    rows: list[tuple] = []
    for start in range(0, len(lines), batch):
        recs = [Rec(TOPIC, 0, i, None, lines[i]) for i in range(start, min(start + batch, len(lines)))]
        now = max((e.get("ts") or 0.0) for e in events[start : start + batch])
        hooks = {} if board is None else {"board": board, "after_step": after_step}
        res = apply_batch(recs, read, fleet, LIMITS, now=now, **hooks)
        for (p, k), value in res.writes.items():
            table[(p, k)] = encode_value(value)
        for out in res.outgoing:
            assert out.topic in ("ctl", "shd"), out  # generated events all decode
            v = json.loads(out.value)
            index = int(out.source.rsplit(":", 1)[1])
            if v["type"] == "verdict_violation":
                named = v.get("verdict_id")
                rows.append(_violation_row(index, v["kind"], named[len(f"{TOPIC}:0:") :] if named else None))
                continue
            prefix, n = v["verdict_id"].rsplit(":", 1)
            assert prefix == out.source and (out.topic == "shd") == v.get("shadow", False)
            if v["action"] == "allow":
                rows.append(_allow_row(index, int(n)))
                continue
            what = "escalation" if v["detector"] == "escalation" else "verdict"
            det = (v["detector"], v["action"], v["level"], v["count"], v.get("shadow", False), v["message"])
            rows.append((index, what, int(n), *det))
    return rows


def replay_rows(events: list[dict], fleet: FleetConfig) -> list[tuple]:
    incidents = fleet.fleet_wide()
    rows: list[tuple] = []
    numbered: dict[int, int] = {}  # event index -> verdicts so far (replay's ids are <event_index>:<n>)
    for r in replay_lines(trace_lines(events, ""), fleet, incidents=incidents, enforcement_rows=True):
        assert isinstance(r, dict)
        kind, index = r.get("type"), r["event_index"]
        if kind == "verdict_violation":
            rows.append(_violation_row(index, r["kind"], r.get("verdict_id")))
        elif kind is None and "detector" in r and r["emitted"]:
            what = "escalation" if r["detector"] == "escalation" else "verdict"
            n = numbered[index] = numbered.get(index, -1) + 1
            det = (r["detector"], r["action"], r["level"], r["count"], r.get("shadow", False), r["message"])
            rows.append((index, what, n, *det))
    return rows


def tune_rows(events: list[dict], fleet: FleetConfig) -> tuple[list[tuple], set[int]]:
    """Tune's decisions as rows, and the events it decided (it skips runs no rule can fire in)."""
    prep = tune.prepare(trace_lines(events, ""))
    rows: list[tuple] = []
    decided: set[int] = set()
    for i, d in tune.decisions(prep, fleet):
        index = prep.lines[i]
        decided.add(index)
        rows += [_det_row(index, "verdict", v.n, v.detection) for v in d.verdicts]
        if d.violation is not None:
            rows.append(_violation_row(index, d.violation.kind, d.violation.verdict_id))
        rows += [_det_row(index, "escalation", v.n, v.detection) for v in d.escalations]
        if d.allow is not None:
            rows.append(_allow_row(index, d.allow))
    return rows, decided


def tune_runs(events: list[dict], fleet: FleetConfig) -> dict[str, set[int]]:
    """Tune's counts of one setting: the runs (by tune's run numbers) it says were blocked / aborted."""
    prep = tune.prepare(trace_lines(events, ""))
    tallies = tune.run_setting(prep, fleet)
    return {
        "blocked": set().union(*(t.blocked for t in tallies.values())),
        "aborted": set().union(*(t.aborted for t in tallies.values())),
    }


def runs_from_rows(events: list[dict], rows: list[tuple]) -> dict[str, set[int]]:
    """The same from replay's rows, numbering runs as tune does (a run ends at its run_end)."""
    prep = tune.prepare(trace_lines(events, ""))
    run_of = dict(zip(prep.lines, prep.runs))
    out: dict[str, set[int]] = {"blocked": set(), "aborted": set()}
    for index, what, _n, _det, action, *_ in rows:
        if what in ("verdict", "escalation") and action in ("block", "abort"):
            out["blocked" if action == "block" else "aborted"].add(run_of[index])
    return out


def without_allows(rows: list[tuple]) -> list[tuple]:
    return [r for r in rows if r[1] != "allow"]


# -- generated traces and configs -----------------------------------------------------------------

AGENTS = ("a", "b", "c")
TOOLS = ("read", "exec", "web_search", "nosuch")
PARAMS = ({"p": 1}, {"p": 2}, {"command": "ls"})
RESULTS = ("same", "same", "same", "error", "error", "error", "veto", "veto", "other", "none")
KINDS = ("pair",) * 8 + ("call",) * 3 + ("result",) * 3 + ("compact", "end", "ack")
DETECTORS = (
    "generic_repeat",
    "known_poll_no_progress",
    "ping_pong",
    "unknown_tool_repeat",
    "global_circuit_breaker",
    "compaction_loop_persisted",
    "fleet_incident",
)


class _Choices:
    """Choices read off one drawn integer: a generated event costs one draw, not a dozen
    (hypothesis' per-draw cost would dominate the 500 examples), and shrinking it towards 0
    still shrinks each choice towards the first option."""

    def __init__(self, x: int) -> None:
        self.x = x

    def pick(self, options):
        self.x, i = divmod(self.x, len(options))
        return options[i]


def build_trace(
    xs: list[int],
    agents: list[str] | tuple[str, ...] = AGENTS,
    tools: list[str] | tuple[str, ...] = TOOLS,
    params: list[dict] | tuple[dict, ...] = PARAMS,
    runs: tuple[str, ...] = ("r1", "r2"),
) -> list[dict]:
    """A fleet's events, one per integer of ``xs`` (each integer's digits are that event's choices):
    a few agents and runs sharing a small repertoire of calls, so that loops, blocks, aborts, fleet
    incidents and disobedient runners are common, not rare. Acks name their verdict ``@<index>:<n>``."""
    events: list[dict] = []
    ts = 100.0
    calls: list[tuple[str, str, str | None, str, dict]] = []  # (agent, run, call id, tool, args) made
    for i, x in enumerate(xs):
        c = _Choices(x)
        kind = c.pick(KINDS)
        ts += c.pick((0.0, 0.5, 3.0, 3.0, 40.0))
        agent = c.pick(agents)
        base: dict = {"agent_id": agent, "run_id": c.pick(runs), "ts": ts}
        if c.pick((False, True)):
            base["session_id"] = f"agent:{agent}:s1"
        event_id = c.pick((None, None, None, f"e{i}", "e0"))  # a repeated id is a duplicate
        if event_id is not None:
            base["event_id"] = event_id
        call_id = c.pick((None, "c1", f"c{i}", f"c{i}"))  # missing, shared, fresh
        tool, args = c.pick(tools), c.pick(params)
        if kind in ("call", "pair"):
            e = {"type": "tool_call", **base, "tool_name": tool, "params": args}
            if call_id is not None:
                e["tool_call_id"] = call_id
            if c.pick((False, True)):
                e["await_decision"] = True
            calls.append((agent, base["run_id"], call_id, tool, args))
        if kind == "pair":  # the call and at once its result (a runner's usual pace)
            events.append(e)
            base = {k: v for k, v in base.items() if k != "event_id"}
        elif kind == "result" and calls and c.pick((False, True, True, True)):  # most answer a call made
            agent, run, call_id, tool, args = c.pick(calls[-4:])
            base = {**base, "agent_id": agent, "run_id": run}
        if kind in ("result", "pair"):
            e = {"type": "tool_result", **base, "tool_name": tool, "params": args}
            if call_id is not None:
                e["tool_call_id"] = call_id
            outcome = c.pick(RESULTS)
            if outcome == "error":
                e["error"] = "boom"
            elif outcome == "veto":
                e["result"] = VETO
            elif outcome != "none":
                e["result"] = outcome
        elif kind == "compact":
            e = {"type": "compaction_retry", **base}
        elif kind == "end":
            e = {"type": "run_end", **base}
        elif kind == "ack":
            e = {
                "type": "verdict_ack",
                **base,
                "verdict_id": f"@{c.pick(range(max(i, 1)))}:{c.pick((0, 1))}",
                "outcome": c.pick(("applied", "failed")),
            }
        events.append(e)
    return events


@st.composite
def traces(draw) -> list[dict]:
    agents = draw(st.lists(st.sampled_from(AGENTS), min_size=1, max_size=draw(st.integers(1, 3)), unique=True))
    tools = draw(st.lists(st.sampled_from(TOOLS), min_size=1, max_size=2, unique=True))
    params = [PARAMS[k] for k in draw(st.lists(st.integers(0, len(PARAMS) - 1), min_size=1, max_size=2, unique=True))]
    runs = draw(st.sampled_from((("r1",), ("r1", "r2"))))
    n = draw(st.integers(1, 40))
    return build_trace(draw(st.lists(st.integers(0, 2**64), min_size=n, max_size=n)), agents, tools, params, runs)


def _ext_block(draw) -> dict:
    block: dict = {}
    shadow = draw(st.sampled_from(("off", "off", "true", "false", "list", "list")))
    if shadow == "true":
        block["shadow"] = True
    elif shadow == "false":
        block["shadow"] = False
    elif shadow == "list":
        block["shadow"] = draw(st.lists(st.sampled_from(DETECTORS), min_size=1, max_size=3, unique=True))
    if draw(st.booleans()):
        block["escalation"] = {"afterBlocks": draw(st.integers(0, 2)), "afterViolations": draw(st.integers(0, 2))}
    if draw(st.integers(0, 2)) == 0:
        block["incidents"] = {
            "enabled": True,
            "minStreak": draw(st.integers(1, 2)),
            "minRuns": 2,
            "minAgents": draw(st.sampled_from((1, 1, 2))),
            "window": draw(st.sampled_from((30, 600))),
            "block": draw(st.sampled_from((True, True, False))),
            "blockAfter": draw(st.integers(1, 2)),
        }
    if draw(st.integers(0, 3)) == 0:
        block["crossRun"] = {"enabled": True, "runs": 2}
    if draw(st.integers(0, 4)) == 0:  # OpenClaw's newest rules (fixed thresholds: 10, 20, 30)
        block["profile"] = "openclaw-latest"
    return block


@st.composite
def configs(draw) -> FleetConfig:
    warning = draw(st.integers(1, 3))
    detection = {
        "enabled": True,
        "warningThreshold": warning,
        "criticalThreshold": warning + draw(st.integers(1, 2)),
        "globalCircuitBreakerThreshold": warning + draw(st.integers(2, 4)),
        "unknownToolThreshold": draw(st.integers(1, 3)),
    }
    if draw(st.booleans()):
        detection["historySize"] = draw(st.integers(4, 10))
    if draw(st.booleans()):
        detection["postCompactionGuard"] = {"windowSize": draw(st.integers(1, 3))}
    doc: dict = {"tools": {"loopDetection": detection}}
    if draw(st.integers(0, 3)):
        doc["loopwarden"] = _ext_block(draw)
    entries = []
    for agent in ("b", "c"):
        entry: dict = {"id": agent}
        if draw(st.booleans()):
            entry["tools"] = {"loopDetection": {"warningThreshold": draw(st.integers(1, 3))}}
        if draw(st.booleans()):
            entry["loopwarden"] = _ext_block(draw)
        entries.append(entry)
    doc["agents"] = {"list": entries}
    return FleetConfig.from_document(doc)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(events=traces(), fleet=configs(), batch=st.sampled_from((1, 3, 50)))
def test_worker_replay_and_tune_decide_alike(events, fleet, batch):
    replayed = replay_rows(events, fleet)
    worked = worker_rows(events, fleet, batch)
    assert without_allows(worked) == replayed
    tuned, decided = tune_rows(events, fleet)
    assert tuned == [r for r in worked if r[1] != "allow" or r[0] in decided]  # skipped: allows only
    assert tune_runs(events, fleet) == runs_from_rows(events, replayed)


# -- the divergences, each a regression test ------------------------------------------------------


def _fleet_trace() -> list[bytes]:
    with open("tests/data/fleet.jsonl", "rb") as fh:
        return [line for line in fh if line.strip()]


def _fleet_config(ext: dict, with_detection: bool = True) -> FleetConfig:
    with open("tests/data/fleet.config.json5", encoding="utf-8") as fh:
        doc = parse_config_text(fh.read()) if with_detection else {}
    return FleetConfig.from_document({**doc, "loopwarden": ext})


def _outcomes(lines: list[bytes], fleet: FleetConfig) -> tuple[list, list, list, list]:
    """(replay's escalation aborts, replay's violations, the worker's aborts, the worker's violations)."""
    rows = [r for r in replay_lines(lines, fleet, enforcement_rows=True) if isinstance(r, dict)]
    res = apply_batch([Rec(TOPIC, 0, i, None, x) for i, x in enumerate(lines)], lambda p, k: None, fleet, LIMITS)
    out = [json.loads(o.value) for o in res.outgoing]
    return (
        [r["event_index"] for r in rows if r.get("detector") == "escalation"],
        [r["kind"] for r in rows if r.get("type") == "verdict_violation"],
        [int(o["verdict_id"].split(":")[2]) for o in out if o.get("detector") == "escalation"],
        [o["kind"] for o in out if o.get("type") == "verdict_violation"],
    )


def test_shadowed_blocks_count_towards_no_escalation_in_replay_as_in_the_worker():
    """``{shadow: true, escalation: {afterBlocks: 1}}`` over the fleet trace: replay used to abort six
    runs for blocks nobody enforced, the worker none."""
    replay_aborts, _, worker_aborts, _ = _outcomes(
        _fleet_trace(), _fleet_config({"shadow": True, "escalation": {"afterBlocks": 1}})
    )
    assert replay_aborts == worker_aborts == []
    enforced = _outcomes(_fleet_trace(), _fleet_config({"escalation": {"afterBlocks": 1}}))
    assert enforced[0] and enforced[0] == enforced[2]  # enforced blocks do escalate, in both


def test_a_shadowed_abort_makes_no_later_call_a_violation():
    """``{shadow: true}`` alone (OpenClaw's defaults: only the post-compaction guard fires, shadowed):
    replay used to take the shadowed abort as the run's abort and report the next call."""
    for ext in ({"shadow": True}, {"shadow": ["compaction_loop_persisted"]}):
        _, replay_violations, _, worker_violations = _outcomes(_fleet_trace(), _fleet_config(ext, with_detection=False))
        assert replay_violations == worker_violations == []
    _, enforced, _, worker_enforced = _outcomes(_fleet_trace(), _fleet_config({}, with_detection=False))
    assert enforced == worker_enforced == ["call_after_abort"]  # the enforced abort is disobeyed


def _aborted_run(next_call: dict, result: dict | None) -> list[dict]:
    """A run the post-compaction guard aborts, then one more call (and its result)."""
    base = {"agent_id": "a", "run_id": "r1"}
    events = [{"type": "compaction_retry", **base}]
    for i in range(3):
        call = {**base, "tool_name": "read", "tool_call_id": f"c{i}", "params": {"p": 1}}
        events += [{"type": "tool_call", **call}, {"type": "tool_result", **call, "result": "same"}]
    late = {**base, "tool_name": "read", "tool_call_id": "late", "params": {"p": 2}}
    events.append({"type": "tool_call", **late, **next_call})
    if result is not None:
        events.append({"type": "tool_result", **late, **result})
    return events


def test_a_gated_call_after_the_abort_that_the_runner_refused_is_no_violation():
    fleet = FleetConfig()
    refused = _aborted_run({"await_decision": True}, {"result": VETO})
    for rows in (replay_rows(refused, fleet), worker_rows(refused, fleet)):
        assert [r[3] for r in rows if r[1] == "verdict"] == ["compaction_loop_persisted"]
        assert [r for r in rows if r[1] == "violation"] == []


def test_a_call_after_the_abort_that_ran_is_a_violation_named_after_the_abort():
    fleet = FleetConfig()
    for call, result in (
        ({"await_decision": True}, {"result": "ran"}),
        ({"await_decision": True}, {"error": "x"}),
        ({}, None),
    ):
        events = _aborted_run(call, result)
        index = len(events) - 1  # judged by the result of a gated call, at the call of an ungated one
        for rows in (replay_rows(events, fleet), worker_rows(events, fleet)):
            abort = next(r for r in rows if r[1] == "verdict")
            assert [r for r in rows if r[1] == "violation"] == [
                _violation_row(index, "call_after_abort", f"{abort[0]}:{abort[2]}")
            ]


def test_the_decision_needs_no_worker():
    """Plain inputs in, a named result out: what a runner deciding in-process calls."""
    from loopwarden.detection.decision import decide_event

    fleet = FleetConfig.from_document({"tools": {"loopDetection": DETECTION}})
    cfg, ext = fleet.resolve("a"), fleet.extensions("a")
    state = None
    decisions = []
    for i in range(4):
        call = {"agent_id": "a", "run_id": "r", "tool_name": "read", "tool_call_id": f"c{i}", "params": {"p": 1}}
        d = decide_event(
            state,
            decode_event(json.dumps({"type": "tool_call", **call, "await_decision": True})),
            cfg,
            ext,
            now=float(i),
            origin=f"call{i}",
        )
        decisions.append(d)
        result = decode_event(json.dumps({"type": "tool_result", **call, "result": "same"}))
        state = decide_event(d.state, result, cfg, ext, now=float(i)).state
    actions = [[v.detection.action for v in d.verdicts] for d in decisions]
    assert actions == [[], [], [], ["block"]]
    assert [det.emitted for det in decisions[2].detections] == [False]  # a warning the buckets held back
    assert [d.allow for d in decisions] == [0, 0, 0, None]
    assert decisions[3].verdict_id(0) == "call3:0" and decisions[3].verdicts[0].enforced
    assert decisions[0].source == "call0" and decisions[0].violation is None and not decisions[0].escalations
