"""Local decisions and the reconnecting outbox, without a broker.

The local decider must say what the worker's batch path says for the same
events and config (same verdicts, detectors, counts); the published
``tool_call`` carries that decision; the worker's repeat of a decision is
dropped, its stricter verdict (a correction) refuses the run's next call;
a failing decision allows the call. The outbox buffers while the broker is
away (bounded, counted), connects by itself, keeps order and resends what
was not confirmed.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from types import SimpleNamespace

import msgspec
import pytest

from loopwarden.runner import LoopClient, wire
from loopwarden.runner.local import LocalDecider
from loopwarden.runner.outbox import Outage, Outbox, OutboxEvents, OutboxLimits
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import decode_event, encode_event, run_key
from loopwarden.schemas.verdicts import Verdict
from loopwarden.worker.batch import Limits, apply_batch

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 12}}}


def outbox(make_producer, max_buffered, **kw) -> Outbox:
    """An Outbox from keywords: its limits, and ``on_NAME`` callables as its events' NAME."""
    events = OutboxEvents()
    for name in [k for k in kw if k.startswith("on_")]:
        setattr(events, name[3:], kw.pop(name))
    return Outbox(make_producer, OutboxLimits(max_buffered=max_buffered, **kw), events)


class Captured:
    """Stands in for the outbox: what would be sent."""

    def __init__(self) -> None:
        self.events: list = []
        self.connected = asyncio.Event()

    def put(self, topic: str, key: bytes | None, value: bytes) -> bool:
        self.events.append(decode_event(value))
        return True

    def __len__(self) -> int:
        return 0

    async def close(self, _limit: float) -> int:
        return 0


def local_client(**kw) -> tuple[LoopClient, Captured]:
    client = LoopClient(bootstrap="127.0.0.1:1", config=kw.pop("config", CONFIG), **kw)
    out = Captured()
    client._outbox = out
    return client, out


async def drive(run, n: int) -> list:
    decisions = []
    for _ in range(n):
        d = await run.check("read", {"path": "a.md"})
        decisions.append(d)
        result = d.blocked_result() if not d.proceed else {"text": "same"}
        await run.tool_result(d, result=result)
    return decisions


class Rec(msgspec.Struct):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


async def test_local_decisions_are_the_workers_verdicts():
    client, out = local_client()
    run = client.run("a", run_id="r1")
    decisions = await drive(run, 14)
    assert client.local and all(d.source in ("local", "pending_block") for d in decisions)
    local = [(d.action, d.verdict.detector, d.verdict.count) for d in decisions if d.verdict is not None]
    # the worker's batch path on the very events the runner published, its decisions taken out
    # (with them the worker publishes only what it decides otherwise: nothing here, test_audit.py)
    plain = [msgspec.structs.replace(e, decision=None) if type(e).__name__ == "ToolCall" else e for e in out.events]
    records = [
        Rec("e", 0, i, run_key(e).encode(), encode_event(e))
        for i, e in enumerate(plain)
        if type(e).__name__ in ("ToolCall", "ToolResult")
    ]
    batch = apply_batch(records, lambda *_: None, FleetConfig.from_document(CONFIG), Limits(control_topic="c"))
    worker = [msgspec.json.decode(o.value, type=Verdict) for o in batch.outgoing if o.topic == "c"]
    assert [(v.action, v.detector, v.count) for v in worker if v.action != "allow"] == local
    assert [d.action for d in decisions] == ["allow"] * 10 + ["warn", "allow", "block", "block"]
    calls = [e for e in out.events if type(e).__name__ == "ToolCall"]
    assert all(not c.await_decision for c in calls)
    assert [c.decision.action for c in calls] == [d.action for d in decisions]
    warn = calls[10].decision
    assert (warn.detector, warn.count, warn.verdict_id) == ("generic_repeat", 10, decisions[10].verdict.verdict_id)
    acks = [e.verdict_id for e in out.events if type(e).__name__ == "VerdictAck"]
    assert acks == [d.verdict.verdict_id for d in decisions[12:]]  # each block acked as applied


async def test_worker_mode_sends_no_decision_and_auto_needs_a_config():
    assert not LoopClient(bootstrap="127.0.0.1:1").local
    assert not LoopClient(bootstrap="127.0.0.1:1", config=CONFIG, decisions="worker").local
    assert LoopClient(bootstrap="127.0.0.1:1", decisions="local").local
    call = wire.tool_call(wire.RunRef(agent_id="a"), "read", {})
    assert b"decision" not in encode_event(call)


def test_loop_client_reads_runner_environment_variables(monkeypatch, tmp_path):
    path = tmp_path / "fleet.json"
    path.write_text(msgspec.json.encode(CONFIG).decode())
    monkeypatch.setenv("LOOPWARDEN_RUNNER_BOOTSTRAP", "broker.example:9093")
    monkeypatch.setenv("LOOPWARDEN_RUNNER_CHECK_TIMEOUT", "0.25")
    monkeypatch.setenv("LOOPWARDEN_RUNNER_CONFIG", str(path))
    client = LoopClient()
    assert client.settings.bootstrap == "broker.example:9093" and client.settings.check_timeout == 0.25
    assert client.local and client.fleet.resolve("a").enabled
    override = LoopClient(bootstrap="127.0.0.1:2", decisions="worker")
    assert override.settings.bootstrap == "127.0.0.1:2" and not override.local
    assert override.settings.check_timeout == 0.25  # the rest still from the environment


async def test_worker_repeats_are_dropped_and_corrections_refuse_the_next_call():
    client, _ = local_client()
    run = client.run("a", run_id="r1")
    decisions = await drive(run, 13)  # ..., warn (10), allow, block (12)
    block = decisions[12]
    same = Verdict(verdict_id="w:0", action="block", agent_id="a", run_id="r1", tool_call_id=block.call.tool_call_id)
    client._on_verdict(b"r1", same)
    assert client.stats.verdicts_agreed == 1 and run.state.pending_block is None
    d = await run.check("write", {"x": 1})
    assert d.action == "allow" and d.source == "local"
    # the worker is stricter about a call the runner allowed (e.g. the runner lost its history)
    stricter = Verdict(
        verdict_id="w:1", action="block", agent_id="a", run_id="r1", tool_call_id=d.call.tool_call_id, message="M"
    )
    client._on_verdict(b"r1", stricter)
    assert client.stats.corrections == 1
    d = await run.check("write", {"x": 2})
    assert (d.action, d.source) == ("block", "pending_block")
    assert d.message == "Tool call blocked by loop detection."  # built from the fields, never the record's text


async def test_a_failing_local_decision_allows_the_call():
    class Broken(FleetConfig):
        def resolve(self, agent_id):
            raise RuntimeError("boom")

    client, out = local_client(config=Broken())
    d = await client.run("a", run_id="r1").check("read", {})
    assert (d.action, d.source) == ("allow", "local") and client.stats.local_errors == 1
    assert out.events[0].decision.action == "allow"


async def test_guard_abort_decided_locally_ends_the_run():
    client, _ = local_client(config={"tools": {"loopDetection": {"enabled": True}}})
    run = client.run("a", run_id="r1")
    await run.compaction_retry("overflow")
    for _ in range(3):
        d = await run.check("read", {"p": 1})
        await run.tool_result(d, result={"same": True})
    assert run.aborted is not None and run.aborted.detector == "compaction_loop_persisted"
    d = await run.check("read", {"p": 2})
    assert (d.action, d.source) == ("abort", "aborted")


def test_local_states_are_bounded():
    local = LocalDecider(FleetConfig.from_document(CONFIG), max_runs=2)
    for key in ("r1", "r2", "r3"):
        local.apply(key, wire.tool_call(wire.RunRef(agent_id="a", run_id=key), "read", {}))
    assert len(local) == 2 and local.evicted == 1
    local.apply("r3", wire.run_end(wire.RunRef(agent_id="a", run_id="r3")))
    assert len(local) == 1


async def test_a_blocked_in_process_run_keeps_its_block_past_its_end_and_a_flood():
    """The engine's states: a run that had a verdict is evicted after every run that had none, and
    keeps its state past run_end (RULES.md §11.3a): the same ids resumed are blocked again."""
    client, out = local_client(max_local_runs=8)
    run = client.run("a", "s", run_id="r1")
    assert [d.action for d in await drive(run, 14)][-2:] == ["block", "block"]
    await run.end()
    for i in range(50):
        await client.run("a", f"f{i}", run_id=f"f{i}").check("read", {"path": "a.md"})
    again = await client.run("a", "s", run_id="r1").check("read", {"path": "a.md"})
    assert (again.action, again.source) == ("block", "local")
    assert client._local.evicted >= 40 and client._local.live(run.ident)


# -- the outbox ------------------------------------------------------------------------


class FakeProducer:
    """Refuses to start ``down`` times (shared), then delivers; ``fail_next`` delivery futures fail."""

    def __init__(self, world: dict) -> None:
        self.world = world
        self.client = SimpleNamespace(cluster=SimpleNamespace(partitions_for_topic=lambda topic: {0, 1, 2}))

    async def start(self) -> None:
        if self.world["down"] > 0:
            self.world["down"] -= 1
            raise ConnectionError("broker down")

    async def stop(self) -> None:
        pass

    async def send(self, topic, value, key=None, partition=None):
        fut = asyncio.get_running_loop().create_future()
        if self.world["fail_next"] > 0:
            self.world["fail_next"] -= 1
            fut.set_exception(ConnectionError("delivery failed"))
        else:
            self.world["log"].append(value)
            fut.set_result(None)
        return fut


async def until(predicate, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


async def test_outbox_buffers_while_down_connects_by_itself_and_keeps_order():
    world = {"down": 3, "fail_next": 0, "log": []}
    counts = {"dropped": 0, "sent": 0}
    box = outbox(
        lambda: FakeProducer(world),
        max_buffered=5,
        send_timeout=1.0,
        close_timeout=1.0,
        backoff_max=0.02,
        on_sent=lambda: counts.__setitem__("sent", counts["sent"] + 1),
        on_dropped=lambda: counts.__setitem__("dropped", counts["dropped"] + 1),
    )
    assert all(box.put("t", b"k", str(i).encode()) for i in range(5))
    assert not box.put("t", b"k", b"5") and counts["dropped"] == 1  # full: dropped, counted, not waited for
    box.start()
    await until(lambda: box.connected.is_set() and len(box) == 0)
    assert world["log"] == [b"0", b"1", b"2", b"3", b"4"] and counts["sent"] == 5
    # a delivery failure: reconnect, and the unconfirmed event is sent again, in order
    world["fail_next"] = 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        box.put("t", b"k", b"6")
        box.put("t", b"k", b"7")
        await until(lambda: len(box) == 0 and world["log"][-1] == b"7")
    assert world["log"][5:] == [b"6", b"7"] or world["log"][5:] == [b"7", b"6", b"7"]
    assert await box.close(0.5) == 0


def test_an_outage_is_logged_a_few_times_not_per_retry(caplog):
    outage = Outage("test", interval=3600)
    with caplog.at_level(logging.WARNING, logger="loopwarden.runner.outbox"):
        for _ in range(1000):
            outage.failed(ConnectionError("down"))
        outage.recovered()
    assert len(caplog.records) == 2 and "connected after" in caplog.records[-1].getMessage()


def test_the_decision_field_on_the_wire():
    from loopwarden.schemas.events import EventDecodeError, RunnerDecision

    raw = (
        b'{"type":"tool_call","agent_id":"a","tool_name":"read","decision":'
        b'{"action":"block","verdict_id":"runner:x:1","detector":"generic_repeat","count":5}}'
    )
    event = decode_event(raw)
    assert event.decision == RunnerDecision(action="block", verdict_id="runner:x:1", detector="generic_repeat", count=5)
    assert decode_event(encode_event(event)) == event
    with pytest.raises(EventDecodeError) as bad:
        decode_event(b'{"type":"tool_call","agent_id":"a","decision":{"action":"maybe"}}')
    assert bad.value.reason == "wrong_type"


def test_aiokafka_retry_lines_are_rate_limited_while_a_client_is_open(caplog):
    from loopwarden.internals import aiokafka_logs

    noisy = logging.getLogger("aiokafka")
    aiokafka_logs.quiet(interval=3600)
    try:
        with caplog.at_level(logging.WARNING, logger="aiokafka"):
            for _ in range(500):
                noisy.error("Unable connect to %r", "127.0.0.1:1")
    finally:
        aiokafka_logs.unquiet()
    assert len(caplog.records) == 3
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="aiokafka"):
        noisy.error("Unable connect to %r", "127.0.0.1:1")
    assert len(caplog.records) == 1  # removed with the last client


async def test_large_results_digested_on_the_wire_stay_unequal_when_their_texts_differ():
    """The MCP proxy and the span bridge send a payload past their bound as its digest
    (``wire.bounded_payload``). A digest that was a plain object hashed alike whatever the text
    (an object is hashed on ``details``/``content`` only), so 80 KB outputs differing only in
    their last line were blocked at the critical threshold: never a healthy block."""
    client, _ = local_client()
    run = client.run(agent_id="a", session_id="s-big", run_id="r-big")
    body = "line\n" * 16_000
    for n in range(20):
        d = await run.check("read", {"path": "big.log"})
        assert d.action not in ("block", "abort"), (n, d.message)
        await run.tool_result(d, result=wire.bounded_payload(msgspec.Raw(msgspec.json.encode(body + str(n))), 65_536))
    same = client.run(agent_id="a", session_id="s-same", run_id="r-same")
    actions = []
    for _ in range(14):
        d = await same.check("read", {"path": "big.log"})
        actions.append(d.action)
        result = (
            d.blocked_result()
            if not d.proceed
            else wire.bounded_payload(msgspec.Raw(msgspec.json.encode(body)), 65_536)
        )
        await same.tool_result(d, result=result)
    assert "block" in actions  # identical large outputs still count as identical


async def test_an_adapters_object_results_hash_as_what_the_model_reads():
    """A framework tool returning a plain object (``{"progress": n}``) was one outcome whatever it held
    (OpenClaw hashes an object on ``details``/``content`` only): a poll whose output changed was blocked
    at the critical threshold. The adapters' gate publishes such an object as its JSON text."""
    from loopwarden.runner.integrations._gate import Gate

    client, _ = local_client()
    gate = Gate(client)
    progressing = wire.RunRef(agent_id="a", session_id="s-poll", run_id="r-poll")
    for n in range(20):
        d = await gate.before(progressing, "poll", {"job": 7}, f"c{n}")
        assert d.proceed, (n, d.message)
        await gate.after(progressing, f"c{n}", result={"progress": n, "state": "running"})
    stuck = wire.RunRef(agent_id="a", session_id="s-stuck", run_id="r-stuck")
    actions = []
    for n in range(14):
        d = await gate.before(stuck, "poll", {"job": 7}, f"c{n}")
        actions.append(d.action)
        if d.proceed:
            await gate.after(stuck, f"c{n}", result={"progress": 0, "state": "running"})
    assert "block" in actions
