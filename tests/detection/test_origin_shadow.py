"""Runs seen only through their spans (``origin: "otel"``) are decided in shadow, whatever the config.

The same events with and without the origin: without it the config enforces
(blocks on the control topic); with it every detection goes to the shadow
topic, marked ``shadow`` and ``origin``, and the control topic stays silent.
Replay (the expected values) shadows them the same way.
"""

from __future__ import annotations

import json

from loopwarden.fleet.offline import FleetTrace
from loopwarden.replay import replay_lines
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import RunEnd, decode_event
from loopwarden.schemas.extensions import observed
from loopwarden.worker.batch import Limits, apply_batch
from tests.support.helpers import Rec

LIMITS = Limits(control_topic="ctl", shadow_topic="shd", dead_letter_topic="dlq")
CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}}}


def loop_events(n: int, origin: str | None) -> list[dict]:
    out = []
    for i in range(n):
        base = {"agent_id": "a", "run_id": "r1", "tool_name": "read", "tool_call_id": f"c{i}", "params": {"p": 1}}
        if origin is not None:
            base["origin"] = origin
        out.append({"type": "tool_call", **base})
        out.append({"type": "tool_result", **base, "result": "same"})
    return out


def by_topic(events: list[dict], config: FleetConfig) -> dict[str, list[dict]]:
    recs = [Rec("ev", 0, i, b"r1", json.dumps(e).encode()) for i, e in enumerate(events)]
    res = apply_batch(recs, lambda p, k: None, config, LIMITS)
    out: dict[str, list[dict]] = {}
    for o in res.outgoing:
        out.setdefault(o.topic, []).append(json.loads(o.value))
    return out


def test_a_runner_run_is_enforced_and_the_same_run_from_spans_is_shadowed():
    config = FleetConfig.from_document(CONFIG)
    enforced = by_topic(loop_events(5, None), config)
    assert "shd" not in enforced
    assert [(v["action"], v["count"]) for v in enforced["ctl"] if v["type"] == "verdict"] == [("block", 3)] * 2

    watched = by_topic(loop_events(5, "otel"), config)
    assert set(watched) == {"shd"}  # nothing on the control topic: no runner listens for a span's run
    got = watched["shd"]
    assert all(v["shadow"] is True and v["origin"] == "otel" for v in got)
    # shadowed, a critical does not stop the run: the blocked call is recorded and the count goes on
    assert [(v["detector"], v["action"], v["count"]) for v in got] == [
        ("generic_repeat", "block", 3),
        ("generic_repeat", "block", 4),
    ]
    rows = [r for r in replay_lines([json.dumps(e) for e in loop_events(5, "otel")], config) if isinstance(r, dict)]
    assert [(r["detector"], r["action"], r["count"]) for r in rows if r["emitted"]] == [
        (v["detector"], v["action"], v["count"]) for v in got
    ]


def test_an_unknown_origin_changes_nothing():
    config = FleetConfig.from_document(CONFIG)
    assert by_topic(loop_events(5, "elsewhere"), config).keys() == {"ctl"}


def test_observed_extensions_shadow_every_detector_and_keep_the_rest():
    config = FleetConfig.from_document({**CONFIG, "loopwarden": {"incidents": {"enabled": True, "minRuns": 2}}})
    event = decode_event(json.dumps(loop_events(1, "otel")[0]))
    ext = config.extensions_of(event)
    assert ext.shadow is True and ext.incidents == config.extensions("a").incidents
    assert config.extensions_of(event) is ext  # cached per agent
    assert observed(ext) is ext
    assert config.extensions_of(decode_event(json.dumps(loop_events(1, None)[0]))).shadow is False


def test_cross_run_warnings_of_span_runs_are_shadowed():
    doc = {**CONFIG, "loopwarden": {"crossRun": {"enabled": True, "runs": 2}}}
    from loopwarden.detection.decision import decide_event

    trace = FleetTrace(FleetConfig.from_document(doc))

    def decide(state, event):  # replay --incidents' own call
        fleet = trace.config
        return decide_event(
            state, event, fleet.resolve(event.agent_id), fleet.extensions_of(event), now=0.0, board=trace.board
        )

    out = []
    for run in ("r1", "r2"):
        state = None
        for e in loop_events(1, "otel"):
            event = decode_event(json.dumps({**e, "run_id": run, "session_id": "s"}))
            state = decide(state, event).state
        end = RunEnd(agent_id="a", session_id="s", run_id=run, ts=1.0, origin="otel")
        result = decide(state, end)
        out += trace.after(state, end, result)
    assert [(v.detector, v.shadow, v.origin) for v in out] == [("cross_run_repeat", True, "otel")]
