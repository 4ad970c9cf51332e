"""Shadow mode (``loopwarden.shadow``): detections reported, nothing enforced, the run unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from loopwarden.detection import decode_state, encode_state, step
from loopwarden.devtools.synthetic import fleet_events
from loopwarden.replay import BadLine, replay_lines
from loopwarden.schemas.config import FleetConfig, load_config, parse_config_text
from loopwarden.schemas.events import decode_event, encode_event, state_key

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"
IDENTITY = ("detector", "level", "count", "warning_key", "message", "tool_name", "action")


def fleet_doc(shadow=None) -> dict:
    doc = parse_config_text((DATA / "fleet.config.json5").read_text(encoding="utf-8"))
    if shadow is not None:
        doc["loopwarden"] = {"shadow": shadow}
    return doc


def rows(lines, config: FleetConfig) -> list[dict]:
    return [r for r in replay_lines(lines, config) if not isinstance(r, BadLine)]


def first_per_run(rows_: list[dict]) -> dict:
    out = {}
    for r in rows_:
        out.setdefault((r["agent_id"], r["session_id"], r["run_id"]), r)
    return out


def synthetic_lines(n_agents=12) -> list[bytes]:
    return [msgspec.json.encode(e) for e in fleet_events(agents=n_agents, runs_per_agent=4, loop_share=0.6, seed=3)]


def fleet_lines() -> list[bytes]:
    return (DATA / "fleet.jsonl").read_bytes().splitlines()


@pytest.mark.parametrize("trace", ["fleet", "synthetic"])
def test_shadow_and_enforce_give_the_same_first_detection_per_run(trace):
    if trace == "fleet":
        lines, enforce_doc, shadow_doc = fleet_lines(), fleet_doc(), fleet_doc(True)
    else:
        lines = synthetic_lines()
        enforce_doc = {"tools": {"loopDetection": {"enabled": True}}}
        shadow_doc = {**enforce_doc, "loopwarden": {"shadow": True}}
    enforce = rows(lines, FleetConfig.from_document(enforce_doc))
    shadow = rows(lines, FleetConfig.from_document(shadow_doc))
    first_e, first_s = first_per_run(enforce), first_per_run(shadow)
    assert len(first_e) >= 3
    assert first_e.keys() == first_s.keys()
    for run, e in first_e.items():
        s = first_s[run]
        assert {k: s[k] for k in IDENTITY} == {k: e[k] for k in IDENTITY}, run
        assert s["event_index"] == e["event_index"]
    assert all(r.get("shadow") is True for r in shadow)
    assert not any("shadow" in r for r in enforce)
    assert {r["action"] for r in enforce} >= {"block"}


def test_shadowed_block_leaves_the_run_as_if_nothing_fired():
    # A run repeating one call with one outcome 30 times: enforce blocks from the 4th call on and
    # vetoes the results; in shadow every call and result is recorded exactly as with detection
    # unable to fire (thresholds out of reach).
    events = []
    for i in range(30):
        common = {
            "agent_id": "a",
            "session_id": "s",
            "run_id": "r",
            "tool_name": "read",
            "tool_call_id": f"c{i}",
            "params": {"path": "x"},
        }
        events.append({"type": "tool_call", **common})
        events.append({"type": "tool_result", **common, "result": {"content": [{"type": "text", "text": "same"}]}})
    lines = [json.dumps(e).encode() for e in events]

    def final_state(doc):
        config = FleetConfig.from_document(doc)
        state = None
        for line in lines:
            ev = decode_event(line)
            state = step(state, ev, config.resolve("a"), ext=config.extensions("a")).state
        return state

    low = {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3, "globalCircuitBreakerThreshold": 4}
    never = {
        "enabled": True,
        "warningThreshold": 1000,
        "criticalThreshold": 2000,
        "globalCircuitBreakerThreshold": 3000,
    }
    shadowed = final_state({"tools": {"loopDetection": low}, "loopwarden": {"shadow": True}})
    enforced = final_state({"tools": {"loopDetection": low}})
    unreachable = final_state({"tools": {"loopDetection": never}})
    assert shadowed.history == unreachable.history
    assert shadowed.blocked == [] and shadowed.guard == unreachable.guard
    assert len(enforced.history) == 3  # blocked calls were not recorded (contrast)


def test_shadow_list_shadows_only_the_named_detectors():
    lines = fleet_lines()
    both = rows(lines, FleetConfig.from_document(fleet_doc(["generic_repeat", "ping_pong"])))
    generic = rows(lines, FleetConfig.from_document(fleet_doc(["generic_repeat"])))
    assert {r["detector"] for r in both if r.get("shadow")} == {"generic_repeat", "ping_pong"}
    assert {r["detector"] for r in generic if r.get("shadow")} == {"generic_repeat"}
    assert any(r["detector"] == "ping_pong" and r["action"] == "block" and "shadow" not in r for r in generic)


def test_per_agent_shadow_over_a_global_enforce():
    doc = fleet_doc()
    for entry in doc["agents"]["list"]:
        if entry["id"] == "Poller":
            entry["loopwarden"] = {"shadow": True}
    out = rows(fleet_lines(), FleetConfig.from_document(doc))
    assert {r["agent_id"] for r in out if r.get("shadow")} == {"POLLER"}
    assert any(r["agent_id"] == "coder" and "shadow" not in r for r in out)


def test_guard_abort_in_shadow_is_reported_once_and_marked():
    lines = (DATA / "guard.jsonl").read_bytes().splitlines()
    enforce = rows(lines, FleetConfig())
    shadow = rows(lines, FleetConfig.from_document({"loopwarden": {"shadow": ["compaction_loop_persisted"]}}))
    assert [r["action"] for r in enforce] == [r["action"] for r in shadow] and enforce
    assert [{**r, "shadow": True} for r in enforce] == shadow


def test_switching_an_agent_from_shadow_to_enforce_takes_effect_on_its_next_event():
    doc = fleet_doc(True)
    config = FleetConfig.from_document(doc)
    lines = fleet_lines()
    events = [decode_event(line) for line in lines if line.strip()]
    coder_blocks = [
        i
        for i, r in ((r["event_index"], r) for r in rows(lines, FleetConfig.from_document(fleet_doc())))
        if r["agent_id"] == "coder" and r["action"] == "block"
    ]
    switch_at = coder_blocks[0]  # switch just before the first block coder would get
    states: dict = {}
    seen = []
    for i, ev in enumerate(events):
        if i == switch_at:
            config = config.with_override("coder", doc["tools"]["loopDetection"], ext={"shadow": False})
        key = state_key(ev)
        result = step(states.get(key), ev, config.resolve(ev.agent_id), ext=config.extensions(ev.agent_id))
        states[key] = result.state
        seen += [(i, ev.agent_id, d.shadow, d.action) for d in result.detections]
    assert (switch_at, "coder", False, "block") in seen
    assert all(s for i, a, s, _ in seen if i < switch_at)
    assert any(a != "coder" and s for i, a, s, _ in seen if i > switch_at)  # others still shadowed


def test_extension_block_without_shadow_gives_byte_identical_replay(tmp_path, capsys):
    from loopwarden.cli import main

    doc = fleet_doc(False)
    doc["loopwarden"]["escalation"] = {}
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert main(["replay", str(DATA / "fleet.jsonl"), "--config", str(path)]) == 0
    with_block = capsys.readouterr().out
    assert main(["replay", str(DATA / "fleet.jsonl"), "--config", str(DATA / "fleet.config.json5")]) == 0
    assert capsys.readouterr().out == with_block and with_block


def test_state_without_usage_decodes_from_its_bytes_of_before_the_usage_slot():
    config = load_config(DATA / "fleet.config.json5")
    states: dict = {}
    for line in fleet_lines():
        ev = decode_event(line)
        result = step(states.get(state_key(ev)), ev, config.resolve(ev.agent_id))
        if result.state is not None:
            states[state_key(ev)] = result.state
    assert states
    for state in states.values():
        assert state.usage is None and not state.seen  # the trace's events carry no event ids
        legacy = [
            state.history,
            state.buckets,
            state.guard,
            state.blocked,
            [],  # seen: a list of ids in format v1
            state.blocked_without_id,
            state.blocked_overflow,
            state.joined,
            state.enforcement,
        ]
        assert decode_state(msgspec.msgpack.encode(legacy)) == state  # stored (format v1) before usage existed
        assert decode_state(encode_state(state)) == state
    assert encode_event(decode_event(fleet_lines()[0])).find(b"usage") == -1
