"""Acks, obedience and escalation through the worker's pure batch step (and replay, which shares the rules)."""

from __future__ import annotations

import asyncio
import json

import msgspec

from loopwarden.detection.state import RunState, RunStateV2, decode_state
from loopwarden.replay import replay_lines
from loopwarden.schemas.config import FleetConfig
from loopwarden.worker.batch import Limits, apply_batch
from loopwarden.worker.metrics import Metrics
from loopwarden.worker.processor import RunProcessor
from loopwarden.worker.runcodec import encode_value
from loopwarden.worker.settings import Settings
from tests.support.helpers import MemRunTable

LD = {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}
ENABLED = FleetConfig.from_document({"tools": {"loopDetection": LD}})
LIMITS = Limits(control_topic="ctl", dead_letter_topic="dlq", ack_timeout=5.0)
VETO = {"details": {"status": "blocked", "deniedReason": "tool-loop", "reason": "CRITICAL"}}


def escalating(**esc) -> FleetConfig:
    return FleetConfig.from_document({"tools": {"loopDetection": LD}, "loopwarden": {"escalation": esc}})


def ev(type_: str, i: int = 0, **fields) -> dict:
    base = {"type": type_, "agent_id": "a", "run_id": "r1"}
    if type_ in ("tool_call", "tool_result"):
        base |= {"tool_name": "read", "tool_call_id": f"c{i}", "params": {"p": 1}}
    if type_ == "tool_result":
        base["result"] = "same"
    return base | fields


class Stream:
    """Feeds events batch by batch, each batch reading the values the previous ones wrote."""

    def __init__(self, fleet: FleetConfig = ENABLED) -> None:
        self.fleet, self.values, self.offset, self.out = fleet, {}, 0, []

    def feed(self, events: list[dict], now: float):
        recs = []
        for e in events:
            recs.append(
                msgspec.defstruct(
                    "R", [("topic", str), ("partition", int), ("offset", int), ("key", bytes), ("value", bytes)]
                )("ev", 0, self.offset, b"r1", json.dumps(e).encode())
            )
            self.offset += 1
        res = apply_batch(recs, lambda p, k: self.values.get((p, k)), self.fleet, LIMITS, now=now)
        self.values.update(res.writes)
        self.out += [json.loads(o.value) for o in res.outgoing if o.topic == "ctl"]
        return res

    def of(self, type_: str) -> list[dict]:
        return [r for r in self.out if r["type"] == type_]

    def state(self) -> RunState:
        (value,) = self.values.values()
        return value.state


def loop(n: int, veto_from: int | None = 3) -> list[dict]:
    """n identical call/result pairs; with criticalThreshold 3 calls 3.. are blocked."""
    out = []
    for i in range(n):
        out.append(ev("tool_call", i))
        obeyed = veto_from is not None and i >= veto_from
        out.append(ev("tool_result", i, result=VETO) if obeyed else ev("tool_result", i))
    return out


def test_ack_latency_outcome_and_no_unacked_count():
    s = Stream()
    s.feed(loop(4), now=100.0)
    (block,) = s.of("verdict")
    assert block["action"] == "block"
    assert [a.verdict_id for a in s.state().enforcement.awaited] == [block["verdict_id"]]
    res = s.feed([ev("verdict_ack", verdict_id=block["verdict_id"], outcome="applied")], now=101.5)
    assert res.counts.acks == {"applied": 1} and res.counts.ack_seconds == [1.5]
    assert s.state().enforcement.awaited == []
    res = s.feed([ev("tool_call", 9, tool_name="other")], now=200.0)
    assert not res.counts.unacked  # acked: never counted as unacknowledged
    res = s.feed([ev("verdict_ack", verdict_id=block["verdict_id"], outcome="applied")], now=201.0)
    assert res.counts.acks == {"applied": 1} and res.counts.ack_seconds == []  # repeated ack: no latency


def test_unacked_counted_once_when_the_deadline_passes_on_a_later_event():
    s = Stream()
    s.feed(loop(4), now=100.0)
    assert not s.feed([ev("tool_call", 9, tool_name="x")], now=104.0).counts.unacked  # within 5 s
    assert s.feed([ev("tool_call", 10, tool_name="y")], now=105.5).counts.unacked == {"block": 1}
    assert not s.feed([ev("tool_call", 11, tool_name="z")], now=120.0).counts.unacked


def test_run_end_counts_what_it_still_owed():
    s = Stream()
    s.feed(loop(4), now=100.0)
    assert s.feed([ev("run_end")], now=101.0).counts.unacked == {"block": 1}


def test_runs_without_verdicts_carry_no_enforcement_state_and_allow_awaits_nothing():
    s = Stream()
    s.feed([ev("tool_call", 0, await_decision=True), ev("tool_result", 0)], now=1.0)
    assert [v["action"] for v in s.of("verdict")] == ["allow"]
    assert s.state().enforcement is None


def test_ran_after_block_is_a_violation_and_verdicts_stay_identical():
    obey, disobey = Stream(), Stream()
    obey.feed(loop(6, veto_from=3), now=1.0)
    disobey.feed(loop(6, veto_from=None), now=1.0)
    assert obey.of("verdict") == disobey.of("verdict")  # the engine took both results as the veto
    assert obey.of("verdict_violation") == []
    blocks = {v["tool_call_id"]: v["verdict_id"] for v in disobey.of("verdict")}
    viols = disobey.of("verdict_violation")
    assert [(v["kind"], v["tool_call_id"], v["verdict_id"]) for v in viols] == [
        ("ran_after_block", c, blocks[c]) for c in ("c3", "c4", "c5")
    ]
    assert disobey.state().enforcement.violations == 3 and disobey.state().enforcement.block_ids == {}


def test_an_error_result_for_a_blocked_call_is_a_violation_too():
    s = Stream()
    events = loop(3) + [ev("tool_call", 3), {**ev("tool_result", 3), "error": "boom"}]
    del events[-1]["result"]
    s.feed(events, now=1.0)
    assert [v["kind"] for v in s.of("verdict_violation")] == ["ran_after_block"]


def test_escalation_after_blocks_aborts_then_a_call_is_call_after_abort():
    s = Stream(escalating(afterBlocks=2))
    s.feed(loop(5), now=1.0)
    actions = [(v["action"], v.get("detector")) for v in s.of("verdict")]
    assert actions == [("block", "generic_repeat"), ("block", "generic_repeat"), ("abort", "escalation")]
    abort = s.of("verdict")[-1]
    assert abort["verdict_id"].endswith(":1") and "2 blocks" in abort["message"]
    assert abort["verdict_id"].rsplit(":", 1)[0] == s.of("verdict")[1]["verdict_id"].rsplit(":", 1)[0]
    s.feed(loop(1, veto_from=0), now=2.0)  # blocked again, vetoed: only the call disobeys
    viols = s.of("verdict_violation")
    assert [(v["kind"], v["verdict_id"]) for v in viols] == [("call_after_abort", abort["verdict_id"])]


def test_escalation_after_violations_and_off_by_default():
    off = Stream()
    off.feed(loop(6, veto_from=None), now=1.0)
    assert {v["action"] for v in off.of("verdict")} == {"block"}
    on = Stream(escalating(afterViolations=2))
    on.feed(loop(6, veto_from=None), now=1.0)
    verdicts = on.of("verdict")
    assert [v["action"] for v in verdicts] == ["block", "block", "abort", "block"]
    assert verdicts[2]["detector"] == "escalation" and "2 verdict violations" in verdicts[2]["message"]


def test_state_stored_before_enforcement_decodes():
    # a version-1 value (no version byte, the layout of versions 1-2) from before the enforcement slot
    old = msgspec.msgpack.encode(msgspec.to_builtins(RunStateV2())[: RunStateV2.__struct_fields__.index("enforcement")])
    assert decode_state(old).enforcement is None


def test_replay_shows_violations_acks_and_escalation_like_the_worker():
    events = loop(5, veto_from=None) + [ev("verdict_ack", verdict_id="x", outcome="failed", detail="ran")]
    lines = [json.dumps(e) for e in events]
    assert all("type" not in r for r in replay_lines(lines, ENABLED))  # default output unchanged
    rows = list(replay_lines(lines, escalating(afterViolations=2), enforcement_rows=True))
    typed = [(r["type"], r.get("kind") or r.get("outcome")) for r in rows if "type" in r]
    assert typed == [("verdict_violation", "ran_after_block")] * 2 + [("verdict_ack", "failed")]
    assert [r["detector"] for r in rows if r.get("action") == "abort"] == ["escalation"]
    s = Stream(escalating(afterViolations=2))
    s.feed(events, now=1.0)
    assert [v["action"] for v in s.of("verdict")] == [r["action"] for r in rows if "type" not in r and r["emitted"]]


def test_the_expiry_sweep_counts_overdue_verdicts_of_quiet_runs_once():
    s = Stream()
    s.feed(loop(4), now=100.0)
    ((slot, value),) = s.values.items()

    async def go():
        metrics, table = Metrics(), MemRunTable({slot: encode_value(value)})
        proc = RunProcessor(Settings(), metrics, table, None, lambda: ENABLED)
        await proc.expire({0}, now=103.0)
        await proc.expire({0}, now=110.0)
        await proc.expire({0}, now=120.0)
        return metrics, table

    metrics, table = asyncio.run(go())
    assert metrics.unacked.labels("block")._value.get() == 1
    assert slot in table.data  # still a live run, written back without the overdue verdict


def test_the_runner_listener_reads_a_violation_as_such_not_as_undecodable():
    from loopwarden.runner.listener import VerdictListener
    from loopwarden.runner.settings import ClientSettings
    from loopwarden.schemas.verdicts import Verdict, VerdictViolation, encode_verdict

    listener = VerdictListener(ClientSettings(), lambda key, v: None, lambda: None)
    raw = encode_verdict(VerdictViolation(violation_id="t:0:1:violation", kind="ran_after_block", agent_id="a"))
    assert type(listener._decoder.decode(raw)) is VerdictViolation
    raw = encode_verdict(Verdict(verdict_id="t:0:1:0", action="abort", agent_id="a", detector="escalation"))
    assert listener._decoder.decode(raw).detector == "escalation"
