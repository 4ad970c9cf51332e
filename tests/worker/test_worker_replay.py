"""The worker's control-topic output equals replay's emitted detections, verdict for verdict."""

from __future__ import annotations

import json

import pytest

from loopwarden.devtools.synthetic import fleet_events
from loopwarden.replay import replay_lines
from loopwarden.schemas.config import load_config
from tests.support.live import assert_matches, collect, decode_verdicts, expected_verdicts, produce_events, run_key

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = {
    "tools": {"loopDetection": {"enabled": True}},
    "agents": {"list": [{"id": "agent-0003", "tools": {"loopDetection": {"warningThreshold": 4}}}]},
}


def _with_gating(events: list[dict]) -> list[dict]:
    """Every third tool_call waits for a decision (await_decision)."""
    out, n = [], 0
    for e in events:
        if e["type"] == "tool_call":
            n += 1
            if n % 3 == 0:
                e = {**e, "await_decision": True}
        out.append(e)
    return out


@pytest.mark.parametrize("path", ["fast", "faust"])
def test_control_topic_equals_replay(tansu, names, workers, tmp_path, path):
    """Both consumer paths: the fast path (each fetch's records as one batch, the default) and
    Faust's per-message stream (``--no-fast-path``), which share the batch path after the hand-over."""
    config = tmp_path / "loop.json5"
    config.write_text(json.dumps(CONFIG))
    worker = workers(names, config=config, extra=[] if path == "fast" else ["--no-fast-path"])
    worker.wait_ready()

    events = _with_gating(list(fleet_events(agents=12, runs_per_agent=3, run_length=30, loop_share=0.6, seed=11)))
    positions = produce_events(tansu, names.events, events)
    expected = expected_verdicts(events, positions, names.events, load_config(config))
    gated = {f"{names.events}:{p}:{o}" for e, (p, o) in zip(events, positions) if e.get("await_decision")}
    assert expected and gated

    def done(records):
        ids = {json.loads(r.value)["verdict_id"] for r in records}
        return set(expected) <= ids and all(f"{g}:0" in ids for g in gated)

    got = decode_verdicts(collect(tansu, names.control, until=done, timeout=90))
    by_id: dict[str, dict] = {}
    for key, verdict in got:
        assert verdict["type"] == "verdict"
        assert verdict["verdict_id"] not in by_id, "no repeats without a crash"
        by_id[verdict["verdict_id"]] = verdict
        index = positions.index(tuple(int(x) for x in verdict["verdict_id"].split(":")[1:3]))
        event = events[index]
        assert key == run_key(event).encode()
        assert verdict["tool_call_id"] == event.get("tool_call_id")
        assert isinstance(verdict["event_ts"], float) and verdict["ts"] >= verdict["event_ts"]

    detections = {vid: v for vid, v in by_id.items() if v["action"] != "allow"}
    assert set(detections) == set(expected)
    for vid, row in expected.items():
        assert_matches(detections[vid], row)

    # await_decision: each gated call got a verdict, `allow` exactly when nothing was published for it.
    for g in gated:
        assert f"{g}:0" in by_id
        if f"{g}:0" not in expected:
            allow = by_id[f"{g}:0"]
            assert allow["action"] == "allow" and "level" not in allow and "detector" not in allow
    allows = [v for v in by_id.values() if v["action"] == "allow"]
    assert {v["verdict_id"].rsplit(":", 1)[0] for v in allows} <= gated

    # Obedience: the synthetic runners answer blocked calls with ordinary results (the tool ran anyway);
    # some go on after their abort; the worker reports each as replay does, naming the verdict disobeyed.
    records = collect(tansu, names.control, timeout=30)
    violations = [v for _, v in decode_verdicts(records, "verdict_violation")]
    replayed = [
        r
        for r in replay_lines([json.dumps(e) for e in events], load_config(config), enforcement_rows=True)
        if isinstance(r, dict) and r.get("type") == "verdict_violation"
    ]
    assert violations and len(violations) == len(replayed)
    assert sorted((v["tool_call_id"], v["kind"]) for v in violations) == sorted(
        (r["tool_call_id"], r["kind"]) for r in replayed
    )
    disobeyed = {"ran_after_block": "block", "call_after_abort": "abort"}
    assert all(by_id[v["verdict_id"]]["action"] == disobeyed[v["kind"]] for v in violations)

    m = worker.metrics()
    assert m["loopwarden_events_total"] == len(events)
    assert m["loopwarden_verdicts_total"] == len(by_id)
    assert m['loopwarden_verdicts_total{action="allow",detector="none",mode="enforce"}'] == len(allows)
    assert m["loopwarden_ready"] == 1
    for kind in disobeyed:
        assert m.get(f'loopwarden_verdict_violations_total{{kind="{kind}"}}', 0) == sum(
            v["kind"] == kind for v in violations
        )
    assert m["loopwarden_assigned_partitions"] == 4


def test_faust_stream_path_does_not_wait_for_state_flushes(tansu, names, workers, tmp_path):
    """``--no-fast-path``: a batch's events are acked once it is durable, and the stream goes on
    meanwhile. With small batches and a state flush only every 120 s, every gated call still gets
    its verdict at once (the stream used to wait for each batch's flush before taking the next)."""
    config = tmp_path / "loop.json5"
    config.write_text(json.dumps(CONFIG))
    worker = workers(
        names, config=config, extra=["--no-fast-path", "--batch-max", "20", "--state-flush-interval", "120"]
    )
    worker.wait_ready()
    events = _with_gating(list(fleet_events(agents=4, runs_per_agent=2, run_length=20, loop_share=0.5, seed=3)))
    positions = produce_events(tansu, names.events, events)
    gated = {f"{names.events}:{p}:{o}:0" for e, (p, o) in zip(events, positions) if e.get("await_decision")}
    assert len(gated) > 40  # more than two batches of 20

    def answered(records):
        return gated <= {json.loads(r.value)["verdict_id"] for r in records}

    got = {v["verdict_id"] for _, v in decode_verdicts(collect(tansu, names.control, until=answered, timeout=30))}
    assert gated <= got, f"{len(gated - got)} of {len(gated)} gated calls unanswered"
    changelog = f"{names.app_id}-runs-changelog"
    assert collect(tansu, changelog, idle=1.0, timeout=5) == []  # no state flush yet: the interval is 120 s
    # SIGTERM: the stop flushes at once instead of waiting for the far-off flush timer (stop() would
    # SIGKILL after 20 s and report -9), and the runs' states reach the changelog.
    assert worker.stop(timeout=20) == 0
    runs = {(e["agent_id"], e["run_id"]) for e in events}
    assert len({r.key for r in collect(tansu, changelog, idle=1.0, timeout=10)}) == len(runs)


def test_a_generated_trace_decides_alike_live(tansu, names, workers, tmp_path):
    """One trace of the unit property test (tests/detection/test_one_decision.py) through a real worker:
    its control and shadow topics say what replay says, verdict for verdict, violations and escalation
    aborts included, under shadow lists, escalation and per-agent overlays. (Fleet incidents stay off:
    a live worker's incident board fills asynchronously, so when a block starts is not the trace's.)"""
    import random

    from tests.detection.test_one_decision import build_trace, replay_rows, worker_rows

    doc = {
        "tools": {
            "loopDetection": {
                "enabled": True,
                "warningThreshold": 1,
                "criticalThreshold": 2,
                "globalCircuitBreakerThreshold": 4,
                "unknownToolThreshold": 2,
            }
        },
        "loopwarden": {"shadow": ["ping_pong"], "escalation": {"afterBlocks": 3, "afterViolations": 1}},
        "agents": {
            "list": [
                {"id": "b", "loopwarden": {"shadow": True}},
                {"id": "c", "tools": {"loopDetection": {"warningThreshold": 2}}},
            ]
        },
    }
    config = tmp_path / "loop.json5"
    config.write_text(json.dumps(doc))
    fleet = load_config(config)
    rng = random.Random(22)
    events = build_trace([rng.getrandbits(64) for _ in range(160)], tools=("read", "exec"), params=({"p": 1},))
    expected = replay_rows(events, fleet)
    kinds = {(r[1], r[3]) for r in expected}
    assert {("escalation", "escalation"), ("violation", "ran_after_block"), ("violation", "call_after_abort")} <= kinds
    assert any(r[7] for r in expected) and any(r[1] == "verdict" and not r[7] for r in expected)  # shadow, enforce
    allows = [r for r in worker_rows(events, fleet) if r[1] == "allow"]
    assert allows

    worker = workers(names, config=config)
    worker.wait_ready()
    positions = produce_events(tansu, names.events, events, ts=False)
    on_control = len([r for r in expected if not r[7]]) + len(allows)
    on_shadow = len([r for r in expected if r[7]])
    control = collect(tansu, names.control, until=lambda rs: len(rs) >= on_control, timeout=90)
    shadow = collect(tansu, names.shadow, until=lambda rs: len(rs) >= on_shadow, timeout=30) if on_shadow else []

    got = []
    for record in [*control, *shadow]:
        v = json.loads(record.value)
        topic, partition, offset, last = v.get("violation_id", v.get("verdict_id")).rsplit(":", 3)
        index = positions.index((int(partition), int(offset)))
        assert topic == names.events and record.key == run_key(events[index]).encode()
        if v["type"] == "verdict_violation":
            named = v.get("verdict_id")
            if named:
                _, p, o, n = named.rsplit(":", 3)
                named = f"{positions.index((int(p), int(o)))}:{n}"
            got.append((index, "violation", None, v["kind"], None, None, None, False, named))
        elif v["action"] == "allow":
            got.append((index, "allow", int(last), None, "allow", None, None, False, None))
        else:
            what = "escalation" if v["detector"] == "escalation" else "verdict"
            det = (v["detector"], v["action"], v["level"], v["count"], v.get("shadow", False), v["message"])
            got.append((index, what, int(last), *det))
    order = {"verdict": 0, "violation": 1, "escalation": 2, "allow": 3}
    got.sort(key=lambda r: (r[0], order[r[1]], r[2] or 0))
    assert [r for r in got if r[1] != "allow"] == expected
    assert [r for r in got if r[1] == "allow"] == allows
