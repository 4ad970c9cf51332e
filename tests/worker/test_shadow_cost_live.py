"""Shadow mode and loop cost on a live worker: the shadow topic, the control topic, the token counters.

Expected records and totals come from replay (the same ``step()`` offline)
and, for the token fixture, from the fixture's own usage numbers.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from loopwarden.devtools.synthetic import fleet_events
from loopwarden.replay import replay_lines
from loopwarden.schemas.config import FleetConfig, load_config
from tests.support.live import assert_matches, collect, decode_verdicts, expected_verdicts, produce, produce_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DETECTION = {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}
VETO = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}


def _write(tmp_path, doc: dict):
    path = tmp_path / "loop.json5"
    path.write_text(json.dumps(doc))
    return path


def _gate_every(events: list[dict], n: int) -> list[dict]:
    out, calls = [], 0
    for e in events:
        if e["type"] == "tool_call":
            calls += 1
            if calls % n == 0:
                e = {**e, "await_decision": True}
        out.append(e)
    return out


def test_shadow_topic_gets_replays_detections_and_the_control_topic_only_allows(tansu, names, workers, tmp_path):
    config = _write(tmp_path, {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"shadow": True}})
    worker = workers(names, config=config)
    worker.wait_ready()
    events = _gate_every(
        list(fleet_events(agents=10, runs_per_agent=3, run_length=30, loop_share=0.7, seed=6, usage=True)), 3
    )
    positions = produce_events(tansu, names.events, events)
    fleet = load_config(config)
    expected = expected_verdicts(events, positions, names.events, fleet)
    assert expected and all(row["shadow"] for row in expected.values())
    assert {row["action"] for row in expected.values()} >= {"block", "abort"}  # criticals too, not only warnings
    gated = {e["tool_call_id"] for e in events if e.get("await_decision")}

    shadow = decode_verdicts(collect(tansu, names.shadow, until=lambda rs: len(rs) >= len(expected), timeout=90))
    by_id = {v["verdict_id"]: v for _, v in shadow}
    assert len(by_id) == len(shadow) and set(by_id) == set(expected)
    for vid, row in expected.items():
        v = by_id[vid]
        assert_matches(v, row)
        assert v["shadow"] is True
        assert v.get("loop_tokens") == row.get("loop_tokens") and v.get("loop_cost") == row.get("loop_cost")
    assert any(v.get("loop_tokens") for v in by_id.values())

    # The runner's view: an allow for each gated call, whatever fired on it in shadow; nothing else.
    control = [json.loads(r.value) for r in collect(tansu, names.control, until=lambda rs: len(rs) >= len(gated))]
    assert [v["action"] for v in control] == ["allow"] * len(gated)
    assert sorted(v["tool_call_id"] for v in control) == sorted(gated)
    assert all(v["type"] == "verdict" and "shadow" not in v for v in control)
    assert not set(v["verdict_id"] for v in control) & set(by_id)

    m = worker.metrics()
    shadow_verdicts = sum(
        v for k, v in m.items() if k.startswith("loopwarden_verdicts_total{") and 'mode="shadow"' in k
    )
    assert shadow_verdicts == len(expected)
    assert m['loopwarden_verdicts_total{action="allow",detector="none",mode="enforce"}'] == len(gated)
    assert m["loopwarden_verdicts_total"] == len(expected) + len(gated)
    assert m["loopwarden_guard_aborts_total"] == 0  # a shadowed abort aborts nothing


def _stuck_calls(run: str, agent: str, first: int, n: int) -> list[dict]:
    """Gated identical calls ``first``..``first+n-1`` of one run, each answered with the same result."""
    events = []
    for i in range(first, first + n):
        base = {
            "agent_id": agent,
            "run_id": run,
            "tool_name": "read",
            "tool_call_id": f"{run}-{i}",
            "params": {"path": "/same"},
        }
        events += [
            {"type": "tool_call", **base, "await_decision": True},
            {"type": "tool_result", **base, "result": "same"},
        ]
    return events


def test_switching_an_agent_from_shadow_to_enforce_takes_effect_on_its_next_event(tansu, names, workers, tmp_path):
    config = _write(tmp_path, {"tools": {"loopDetection": DETECTION}, "loopwarden": {"shadow": True}})
    worker = workers(names, config=config)
    worker.wait_ready()

    produce_events(tansu, names.events, _stuck_calls("run-1", "a1", 0, 7))
    control = decode_verdicts(collect(tansu, names.control, until=lambda rs: len(rs) >= 7))
    assert [v["action"] for _, v in control] == ["allow"] * 7  # the 6th and 7th would be blocked: shadowed
    shadowed = decode_verdicts(collect(tansu, names.shadow, until=lambda rs: len(rs) >= 2))
    assert [(v["action"], v["tool_call_id"]) for _, v in shadowed] == [("block", f"run-1-{i}") for i in (5, 6)]

    asyncio.run(produce(tansu, names.config, [(b"a1", json.dumps({"loopwarden": {"shadow": False}}).encode())]))
    worker.wait_metric("loopwarden_config_updates_total", 1)
    produce_events(tansu, names.events, _stuck_calls("run-1", "a1", 7, 1))

    control = decode_verdicts(collect(tansu, names.control, until=lambda rs: len(rs) >= 8))
    assert [v["action"] for _, v in control] == ["allow"] * 7 + ["block"]
    last = control[-1][1]
    assert (last["tool_call_id"], last["detector"]) == ("run-1-7", "generic_repeat")
    assert last["count"] >= DETECTION["criticalThreshold"]  # the shadowed calls were recorded: the streak went on
    assert "shadow" not in last
    assert len(decode_verdicts(collect(tansu, names.shadow, idle=1.0))) == 2  # nothing more in shadow
    m = worker.metrics()
    assert m['loopwarden_verdicts_total{action="block",detector="generic_repeat",mode="enforce"}'] == 1
    assert m['loopwarden_verdicts_total{action="block",detector="generic_repeat",mode="shadow"}'] == 2


def _priced_fixture() -> list[dict]:
    """Three stuck runs (9 identical calls; an obedient runner from the first block on) and a healthy one.

    Every call of a stuck run is in its loop, so its loop costs the sum of its calls' usage;
    the healthy run's calls (all different) cost no loop anything.
    """
    events = []
    for r in range(3):
        for i in range(9):
            base = {
                "agent_id": f"ag{r}",
                "run_id": f"loop{r}",
                "tool_name": "read",
                "tool_call_id": f"loop{r}-{i}",
                "params": {"path": f"/stuck/{r}"},
            }
            usage = {"input_tokens": 1000 * (r + 1) + i, "output_tokens": 7 * i, "cost": 0.001 * (i + 1)}
            events += [
                {"type": "tool_call", **base, "usage": usage},
                {"type": "tool_result", **base, "result": VETO if i >= 5 else "same"},
            ]
    for i in range(9):
        base = {
            "agent_id": "ag9",
            "run_id": "healthy",
            "tool_name": "read",
            "tool_call_id": f"h-{i}",
            "params": {"path": f"/f{i}"},
        }
        events += [
            {"type": "tool_call", **base, "usage": {"input_tokens": 500, "output_tokens": 5, "cost": 0.01}},
            {"type": "tool_result", **base, "result": f"text {i}"},
        ]
    return events


def test_loop_tokens_total_on_the_worker_is_exactly_replays(tansu, names, workers, tmp_path):
    config = _write(tmp_path, {"tools": {"loopDetection": DETECTION}})
    worker = workers(names, config=config)
    worker.wait_ready()
    events = _priced_fixture()
    produce_events(tansu, names.events, events)

    stuck = [e["usage"] for e in events if e["type"] == "tool_call" and e["run_id"] != "healthy"]
    by_hand = sum(u["input_tokens"] + u["output_tokens"] for u in stuck)
    rows = [
        r
        for r in replay_lines(
            [json.dumps(e) for e in events], FleetConfig.from_document({"tools": {"loopDetection": DETECTION}})
        )
        if isinstance(r, dict)
    ]
    last_per_run = {r["run_id"]: r for r in rows}  # a loop's loop_tokens is its total so far
    assert set(last_per_run) == {"loop0", "loop1", "loop2"}
    replayed = sum(r["loop_tokens"] for r in last_per_run.values())
    assert replayed == by_hand

    series = 'loopwarden_loop_tokens_total{detector="generic_repeat",mode="enforce",tool="read"}'
    worker.wait_metric("loopwarden_events_total", len(events))
    m = worker.metrics()
    assert m[series] == replayed
    assert m["loopwarden_loop_tokens_total"] == replayed  # no other series: the healthy run is in no loop
    cost = m['loopwarden_loop_cost_total{detector="generic_repeat",mode="enforce",tool="read"}']
    assert cost == pytest.approx(sum(r["loop_cost"] for r in last_per_run.values()))
    assert cost == pytest.approx(sum(u["cost"] for u in stuck))

    control = decode_verdicts(collect(tansu, names.control, until=lambda rs: len(rs) >= 12))
    blocks = {v["tool_call_id"]: v for _, v in control if v["action"] == "block"}
    emitted = {events[r["event_index"]]["tool_call_id"]: r for r in rows if r["emitted"]}
    assert set(blocks) == set(emitted)
    assert all(blocks[c]["loop_tokens"] == emitted[c]["loop_tokens"] for c in blocks)
