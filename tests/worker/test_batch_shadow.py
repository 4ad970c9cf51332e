"""The batch path's side of shadow mode and loop cost: where shadowed verdicts go, what is counted.

Shadowed detections are published on the shadow topic only; a gated call
whose only detections are shadowed is still allowed on the control topic;
detections, verdicts and loop tokens are counted with their mode. Expected
values come from replay (the same ``step()`` over the same events), not from
the batch path itself.
"""

from __future__ import annotations

import json

from loopwarden.replay import replay_lines
from loopwarden.schemas.config import FleetConfig
from loopwarden.worker.batch import Limits, apply_batch
from tests.support.helpers import Rec

LIMITS = Limits(control_topic="ctl", shadow_topic="shd", dead_letter_topic="dlq")
DETECTION = {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}


def fleet(shadow=None) -> FleetConfig:
    doc: dict = {"tools": {"loopDetection": DETECTION}}
    if shadow is not None:
        doc["loopwarden"] = {"shadow": shadow}
    return FleetConfig.from_document(doc)


def loop_events(n: int, gated: bool = False, usage: bool = False, veto_from: int | None = None) -> list[dict]:
    """``n`` identical read calls with identical results; every call gated if ``gated``.

    ``veto_from``: from that call on the result is the veto (an obedient runner under enforcement).
    """
    out = []
    for i in range(n):
        base = {"agent_id": "a", "run_id": "r1", "tool_name": "read", "tool_call_id": f"c{i}", "params": {"p": 1}}
        call = {"type": "tool_call", **base, "await_decision": gated}
        if usage:
            call["usage"] = {"input_tokens": 100 + i, "output_tokens": 10 * (i + 1), "cost": 0.25}
        out.append(call)
        vetoed = veto_from is not None and i >= veto_from
        result = {"details": {"status": "blocked", "deniedReason": "tool-loop"}} if vetoed else "same"
        out.append({"type": "tool_result", **base, "result": result})
    return out


def records(events: list[dict]) -> list[Rec]:
    return [Rec("ev", 0, i, b"r1", json.dumps(e).encode()) for i, e in enumerate(events)]


def replayed(events: list[dict], config: FleetConfig) -> list[dict]:
    return [r for r in replay_lines([json.dumps(e) for e in events], config) if isinstance(r, dict)]


def by_topic(res) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for o in res.outgoing:
        out.setdefault(o.topic, []).append(json.loads(o.value))
    return out


def test_shadow_detections_go_to_the_shadow_topic_only_and_match_replay():
    events = loop_events(6)
    res = apply_batch(records(events), lambda p, k: None, fleet(True), LIMITS)
    topics = by_topic(res)
    assert "ctl" not in topics  # nothing gated, nothing enforced: the control topic stays silent
    expected = [r for r in replayed(events, fleet(True)) if r["emitted"]]
    assert expected and all(r["shadow"] for r in expected)
    got = topics["shd"]
    assert [(v["detector"], v["action"], v["count"]) for v in got] == [
        (r["detector"], r["action"], r["count"]) for r in expected
    ]
    assert all(v["shadow"] is True for v in got)
    # verdict ids name the triggering event as on the control topic: <topic>:<partition>:<offset>:<n>
    assert [v["verdict_id"] for v in got] == [f"ev:0:{r['event_index']}:0" for r in expected]
    assert sum(res.counts.verdicts[k] for k in res.counts.verdicts if k[2] == "shadow") == len(got)
    assert not [k for k in res.counts.verdicts if k[2] == "enforce"]
    assert res.counts.guard_aborts == 0


def test_gated_calls_whose_detections_are_shadowed_still_get_allow():
    events = loop_events(6, gated=True)
    res = apply_batch(records(events), lambda p, k: None, fleet(True), LIMITS)
    topics = by_topic(res)
    control = topics["ctl"]
    calls = [e for e in events if e["type"] == "tool_call"]
    assert [v["action"] for v in control] == ["allow"] * len(calls)  # as if no detector had fired
    assert [v["tool_call_id"] for v in control] == [e["tool_call_id"] for e in calls]
    assert all("shadow" not in v and "detector" not in v for v in control)
    shadow_ids = {v["verdict_id"] for v in topics["shd"]}
    assert shadow_ids and not shadow_ids & {v["verdict_id"] for v in control}  # ids never collide
    assert res.counts.verdicts[("allow", "none", "enforce")] == len(calls)


def test_enforce_is_unchanged_and_counted_as_enforce():
    events = loop_events(6, gated=True, veto_from=3)
    res = apply_batch(records(events), lambda p, k: None, fleet(), LIMITS)
    topics = by_topic(res)
    assert "shd" not in topics
    blocks = [v for v in topics["ctl"] if v["action"] == "block"]
    assert blocks and all("shadow" not in v for v in blocks)
    assert all(k[2] == "enforce" for k in res.counts.verdicts)
    assert all(k[3] == "enforce" for k in res.counts.detections)


def test_shadow_list_shadows_only_the_named_detectors():
    events = loop_events(6, veto_from=3)
    res = apply_batch(records(events), lambda p, k: None, fleet(["ping_pong"]), LIMITS)
    topics = by_topic(res)
    assert "shd" not in topics and [v["detector"] for v in topics["ctl"]] == ["generic_repeat"] * 3


def test_loop_tokens_counted_by_mode_equal_replays_loop_tokens():
    for shadow, mode in ((True, "shadow"), (None, "enforce")):
        events = loop_events(8, usage=True, veto_from=None if shadow else 3)
        config = fleet(shadow)
        res = apply_batch(records(events), lambda p, k: None, config, LIMITS, tool_label=lambda name: name)
        rows = replayed(events, config)
        last = rows[-1]  # the loop's total so far: the last detection of the one loop of this run
        # every call of this run is in its one loop (from the first call of the streak on)
        spent = [e["usage"] for e in events if e["type"] == "tool_call"]
        assert last["loop_tokens"] == sum(u["input_tokens"] + u["output_tokens"] for u in spent)
        assert last["loop_cost"] == sum(u["cost"] for u in spent)
        assert dict(res.counts.loop_tokens) == {("generic_repeat", "read", mode): last["loop_tokens"]}
        assert res.counts.loop_cost[("generic_repeat", "read", mode)] == last["loop_cost"]
        emitted = [v for vs in by_topic(res).values() for v in vs if v.get("detector")]
        assert emitted[-1]["loop_tokens"] == [r for r in rows if r["emitted"]][-1]["loop_tokens"]
        assert all(v.get("loop_cost") is not None for v in emitted)


def test_no_usage_no_loop_tokens_and_no_fields():
    res = apply_batch(records(loop_events(6, veto_from=3)), lambda p, k: None, fleet(), LIMITS)
    assert not res.counts.loop_tokens and not res.counts.loop_cost
    assert all("loop_tokens" not in v for vs in by_topic(res).values() for v in vs)


def test_synthetic_usage_changes_nothing_but_the_usage_field():
    """``fleet_events(usage=True)``: every call carries valid usage; the seed gives the same events otherwise."""
    from loopwarden.devtools.synthetic import fleet_events
    from loopwarden.schemas.events import ToolCall, decode_event

    plain = list(fleet_events(agents=6, seed=5))
    priced = list(fleet_events(agents=6, seed=5, usage=True))
    assert [{k: v for k, v in e.items() if k != "usage"} for e in priced] == plain
    calls = [decode_event(json.dumps(e)) for e in priced if e["type"] == "tool_call"]
    assert calls and all(isinstance(c, ToolCall) and c.usage is not None and c.usage.cost > 0 for c in calls)
    assert not any("usage" in e for e in priced if e["type"] != "tool_call")


def test_a_call_to_a_blocked_signature_is_charged_even_when_nothing_fires_on_it():
    """Charges are counted on every step that has one, not only on steps with detections."""
    config = FleetConfig.from_document({"tools": {"loopDetection": {**DETECTION, "historySize": 6}}})
    veto = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}
    events: list[dict] = []

    def pair(i: int, path: str, result) -> None:
        base = {"agent_id": "a", "run_id": "r1", "tool_name": "read", "tool_call_id": f"c{i}", "params": {"path": path}}
        events.extend(
            [
                {"type": "tool_call", **base, "usage": {"input_tokens": 100, "output_tokens": i}},
                {"type": "tool_result", **base, "result": result},
            ]
        )

    for i in range(6):  # the 6th identical call is blocked (vetoed)
        pair(i, "/same", veto if i == 5 else "same")
    for i in range(6, 12):  # other work pushes the loop out of the history
        pair(i, f"/other{i}", f"text {i}")
    pair(12, "/same", "same")  # back to the blocked call: no detector fires, the model still paid for it
    res = apply_batch(records(events), lambda p, k: None, config, LIMITS, tool_label=lambda name: name)
    rows = replayed(events, config)
    assert rows[-1]["event_index"] < 2 * 12  # no detection on the last call
    charged_at_detections = rows[-1]["loop_tokens"]
    assert charged_at_detections == sum(100 + i for i in range(6))
    assert res.counts.loop_tokens[("generic_repeat", "read", "enforce")] == charged_at_detections + 100 + 12
