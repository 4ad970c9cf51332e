"""Spans never touch enforcement: a run seen through its spans (``origin: "otel"``) has a state of its own.

The security review's two attacks, in the worker's batch path and in replay:
20 tool spans naming a runner's agent and run id made that run's first real
call an enforced block; one ``invoke_agent`` span (a ``run_end`` from spans)
wiped a looping run's history, so its loop was never blocked. Both shared the
runner's state because the origin was not part of the state key.
"""

from __future__ import annotations

import copy
import json

from loopwarden.detection.decision import decide_event
from loopwarden.replay import replay_lines
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import decode_event, state_key
from loopwarden.worker.batch import Limits, apply_batch
from tests.support.helpers import Rec

LIMITS = Limits(control_topic="ctl", shadow_topic="shd", dead_letter_topic="dlq")
CONFIG = FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}})  # warn 10, block 20


def pair(i: int, origin: str | None = None) -> list[dict]:
    base = {"agent_id": "victim", "session_id": "s", "run_id": "r1", "tool_name": "read", "tool_call_id": f"c{i}"}
    base["params"] = {"path": "a.txt"}
    if origin is not None:
        base["origin"] = origin
    return [{"type": "tool_call", **base}, {"type": "tool_result", **base, "result": "same"}]


def run_end(origin: str | None) -> dict:
    end = {"type": "run_end", "agent_id": "victim", "session_id": "s", "run_id": "r1"}
    return end if origin is None else {**end, "origin": origin}


def worker_out(events: list[dict]) -> list[tuple[str, dict]]:
    recs = [Rec("ev", 0, i, b"r1", json.dumps(e).encode()) for i, e in enumerate(events)]
    res = apply_batch(recs, lambda p, k: None, CONFIG, LIMITS)
    return [(o.topic, json.loads(o.value)) for o in res.outgoing]


def replayed(events: list[dict]) -> list[tuple]:
    rows = replay_lines([json.dumps(e) for e in events], CONFIG, enforcement_rows=True)
    return [
        (r.get("detector") or r.get("type"), r.get("action"), r.get("count"), r.get("shadow", False))
        for r in rows
        if r.get("emitted", True)
    ]


def test_twenty_spans_naming_a_runner_run_do_not_block_its_first_call():
    spans = [e for i in range(20) for e in pair(i, "otel")]
    first = pair(100)[0]
    out = worker_out([*spans, first])
    assert [t for t, _ in out if t == "ctl"] == []  # nothing enforced: the runner's call is its first
    assert {v["origin"] for t, v in out} == {"otel"}  # the spans' own run, shadowed
    assert all(t == "shd" for t, _ in out)
    assert not any(row[3] is False for row in replayed([*spans, first]))


def test_a_run_end_from_spans_does_not_reset_a_runner_run():
    loop = (
        [e for i in range(15) for e in pair(i)]
        + [run_end("otel")]
        + [e for i in range(15, 20) for e in pair(i)]
        + [pair(20)[0]]
    )
    ctl = [v for t, v in worker_out(loop) if t == "ctl" and v.get("type") == "verdict"]
    # the runner's run keeps its history: warned at 10, its 21st identical call blocked (20 identical outcomes)
    assert [(v["action"], v["count"]) for v in ctl] == [("warn", 10), ("block", 20)]
    assert [r[:3] for r in replayed(loop)] == [("generic_repeat", "warn", 10), ("generic_repeat", "block", 20)]


def test_a_span_run_has_a_state_key_of_its_own():
    runner = decode_event(json.dumps(pair(0)[0]))
    spans = decode_event(json.dumps(pair(0, "otel")[0]))
    other = decode_event(json.dumps(pair(0, "elsewhere")[0]))  # not an observed origin: a runner's event
    assert state_key(runner) == ("victim", "s", "r1") == state_key(other)
    assert state_key(spans) == ("victim", "s", "r1", "otel")


def test_a_span_event_commits_no_violation_and_escalates_nothing():
    """Even given a runner's state with a pending block (it never is), a span event is judged without enforcement."""
    doc = {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"escalation": {"enabled": True}}}
    config = FleetConfig.from_document(doc)
    state = None
    events = [e for i in range(20) for e in pair(i)] + [pair(20)[0]]  # the 21st identical call is blocked
    for e in events:
        event = decode_event(json.dumps(e))
        state = decide_event(state, event, config.resolve("victim"), config.extensions_of(event), 0.0).state
    assert state.enforcement is not None and "c20" in state.blocked
    runner_ran = decode_event(json.dumps(pair(20)[1]))
    span_ran = decode_event(json.dumps(pair(20, "otel")[1]))
    d = decide_event(copy.deepcopy(state), runner_ran, config.resolve("victim"), config.extensions_of(runner_ran), 0.0)
    assert d.violation is not None  # the runner's result of the blocked call: it ran after the block
    d = decide_event(state, span_ran, config.resolve("victim"), config.extensions_of(span_ran), 0.0)
    assert d.violation is None and not d.escalations and d.allow is None
    assert all(not v.enforced for v in d.verdicts)
