"""Loop cost: ``usage`` on tool calls charged to loops, each call once (totals worked out by hand)."""

from __future__ import annotations

import json

import pytest

from loopwarden.detection import decode_state, encode_state, step
from loopwarden.replay import BadLine, replay_lines
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import EventDecodeError, decode_event, state_key

LOW = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "historySize": 3,
            "warningThreshold": 2,
            "criticalThreshold": 3,
            "globalCircuitBreakerThreshold": 4,
        }
    }
}
SAME = {"content": [{"type": "text", "text": "same"}]}


def call(n, tool, params, usage=None, run="r1"):
    e = {
        "type": "tool_call",
        "agent_id": "a",
        "session_id": "s",
        "run_id": run,
        "tool_call_id": f"c{n}",
        "tool_name": tool,
        "params": params,
    }
    if usage is not None:
        e["usage"] = usage
    return e


def result(n, tool, params, value=SAME, run="r1"):
    return {
        "type": "tool_result",
        "agent_id": "a",
        "session_id": "s",
        "run_id": run,
        "tool_call_id": f"c{n}",
        "tool_name": tool,
        "params": params,
        "result": value,
    }


def u(i, o, cost=None):
    return {"input_tokens": i, "output_tokens": o, **({"cost": cost} if cost is not None else {})}


X = {"path": "x"}


def loop_trace():
    """read(x) with one outcome until blocked, retried, then again after the history moved on."""
    return [
        call(1, "read", X, u(100, 10, 0.01)),
        result(1, "read", X),
        call(2, "read", X, u(100, 20)),
        result(2, "read", X),
        call(3, "read", X, u(100, 30, 0.02)),
        result(3, "read", X),  # warning, count 2: c1+c2+c3
        call(4, "read", X, u(100, 40)),
        result(4, "read", X),  # block, count 3: c4 only (c1-c3 charged)
        call(5, "read", X, u(50, 5, 0.005)),
        result(5, "read", X),  # block again: c5
        call(6, "exec", {"c": 1}, u(7, 3)),
        result(6, "exec", {"c": 1}, {"ok": 1}),  # not a loop
        call(7, "exec", {"c": 2}, u(7, 3)),
        result(7, "exec", {"c": 2}, {"ok": 2}),
        call(8, "exec", {"c": 3}, u(7, 3)),
        result(8, "exec", {"c": 3}, {"ok": 3}),
        call(9, "read", X, u(1000, 1, 0.1)),
        result(9, "read", X),  # nothing fires (history moved on): charged to the block
    ]


def drive(events, doc=LOW):
    config = FleetConfig.from_document(doc)
    states, out = {}, []
    for e in events:
        ev = decode_event(json.dumps(e))
        key = state_key(ev)
        res = step(states.get(key), ev, config.resolve(ev.agent_id), ext=config.extensions(ev.agent_id))
        states[key] = encode_state(res.state) and decode_state(encode_state(res.state))  # through msgpack
        out.append((e.get("tool_call_id"), e["type"], res))
    return out


def test_loop_tokens_and_cost_by_hand():
    out = drive(loop_trace())
    dets = [(cid, d.action, d.count, d.loop_tokens, d.loop_cost) for cid, _t, r in out for d in r.detections]
    assert [(c, a, n, t) for c, a, n, t, _ in dets] == [
        ("c3", "warn", 2, 110 + 120 + 130),
        ("c4", "block", 3, 360 + 140),
        ("c5", "block", 3, 500 + 55),
    ]
    assert [c for *_, c in dets] == pytest.approx([0.03, 0.03, 0.035])
    charges = [(cid, r.charge.detector, r.charge.tokens) for cid, t, r in out if r.charge is not None]
    assert charges == [
        ("c3", "generic_repeat", 360),
        ("c4", "generic_repeat", 140),
        ("c5", "generic_repeat", 55),
        ("c9", "generic_repeat", 1001),
    ]
    assert sum(t for *_, t in charges) == 360 + 140 + 55 + 1001  # c6-c8 never charged
    c9 = next(r for cid, t, r in out if cid == "c9" and t == "tool_call")
    assert c9.detections == () and c9.charge.cost == pytest.approx(0.1)


def test_a_loop_detected_again_charges_only_new_calls():
    # Default thresholds (warn at 10 previous calls): warnings at counts 10..19, block at 20.
    doc = {"tools": {"loopDetection": {"enabled": True}}}
    events = []
    for n in range(1, 24):
        events += [call(n, "read", X, u(n, 0)), result(n, "read", X)]
    out = drive(events, doc)
    dets = [d for *_, r in out for d in r.detections]
    assert [d.count for d in dets] == list(range(10, 20)) + [20, 20, 20]
    # first warning (11th call): calls 1..11; each later one adds its own call
    assert dets[0].loop_tokens == sum(range(1, 12))
    assert [d.loop_tokens for d in dets] == [sum(range(1, n + 1)) for n in range(11, 24)]
    assert sum(r.charge.tokens for *_, r in out if r.charge) == sum(range(1, 24))


def test_ping_pong_charges_the_alternating_tail():
    doc = {
        "tools": {
            "loopDetection": {
                "enabled": True,
                "warningThreshold": 3,
                "criticalThreshold": 5,
                "globalCircuitBreakerThreshold": 100,
            }
        }
    }
    A, B = ("read", {"p": "a"}), ("list", {"p": "b"})
    events = [call(0, "exec", {"warmup": 1}, u(500, 0)), result(0, "exec", {"warmup": 1}, {"r": 0})]
    for n in range(1, 5):
        tool, params = A if n % 2 else B
        events += [call(n, tool, params, u(n * 10, 1)), result(n, tool, params)]
    out = drive(events, doc)
    dets = [d for *_, r in out for d in r.detections]
    # call 3 closes A,B,A (count 3): calls 1-3, not the warm-up call; call 4 (count 4) adds only itself
    assert [(d.detector, d.count, d.loop_tokens) for d in dets] == [
        ("ping_pong", 3, 11 + 21 + 31),
        ("ping_pong", 4, 63 + 41),
    ]
    assert dets[0].loop_cost is None


def test_guard_abort_charges_the_repeated_triple_after_compaction():
    E = {"command": "make"}
    events = [
        call(0, "exec", E, u(1000, 0)),
        result(0, "exec", E),
        {"type": "compaction_retry", "agent_id": "a", "session_id": "s", "run_id": "r1"},
    ]
    for n, tokens in ((1, 11), (2, 22), (3, 33)):
        events += [call(n, "exec", E, u(tokens, 0, 0.5)), result(n, "exec", E)]
    out = drive(events, {})  # enabled missing: only the guard runs
    aborts = [(cid, d, r.charge) for cid, _t, r in out for d in r.detections]
    assert [(cid, d.action, d.count, d.loop_tokens) for cid, d, _ in aborts] == [("c3", "abort", 3, 66)]
    assert aborts[0][1].loop_cost == pytest.approx(1.5) and aborts[0][2].tokens == 66


def test_runs_without_usage_keep_no_usage_state():
    events = [{k: v for k, v in e.items() if k != "usage"} for e in loop_trace()]
    out = drive(events)
    assert all(r.charge is None for *_, r in out)
    assert all(d.loop_tokens is None and d.loop_cost is None for *_, r in out for d in r.detections)
    assert all(r.state.usage is None for *_, r in out)


def test_replay_prints_loop_tokens(tmp_path):
    lines = [json.dumps(e) for e in loop_trace()]
    rows = [r for r in replay_lines(lines, FleetConfig.from_document(LOW)) if not isinstance(r, BadLine)]
    assert [r["loop_tokens"] for r in rows] == [360, 500, 555]
    assert list(rows[0])[-3:] == ["action", "loop_tokens", "loop_cost"]


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": -1, "output_tokens": 0},
        {"input_tokens": 1},
        {"input_tokens": 1, "output_tokens": 1, "cost": -0.5},
        "many",
    ],
)
def test_bad_usage_is_a_bad_event(usage):
    with pytest.raises(EventDecodeError):
        decode_event(json.dumps({**call(1, "read", X), "usage": usage}))
