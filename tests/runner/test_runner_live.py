"""The runner client against a real Tansu broker and a real worker process.

One worker serves the module (its start dominates the time); each test uses
fresh run ids, so runs never see each other's history. What is asserted is
behaviour (decisions, delivery, counters), never timing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
import uuid
from pathlib import Path

import msgspec
import pytest
from aiokafka import AIOKafkaProducer

from loopwarden.devtools.broker import EmbeddedBroker
from loopwarden.runner import LoopClient, blocked_tool_result, is_blocked_result
from loopwarden.schemas.verdicts import Verdict
from tests.support.live import Names, WorkerProcess, ready_worker

pytestmark = pytest.mark.integration

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 12}}}
WARN_TEXT = "WARNING: You have called read 10 times with identical arguments."
BLOCK_TEXT = "CRITICAL: Called read with identical arguments and identical outcomes 12 times."


@pytest.fixture(scope="module")
def worker(tansu, tmp_path_factory):
    yield from ready_worker(tansu, tmp_path_factory.mktemp("runner-worker"), "runner", CONFIG)


def client_for(tansu: str, worker: WorkerProcess, **overrides) -> LoopClient:
    names = worker.names
    return LoopClient(bootstrap=tansu, events_topic=names.events, control_topic=names.control, **overrides)


def rid(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:10]}"


async def until(predicate, timeout: float = 30.0) -> None:
    """Wait for a condition driven by the broker (a hang guard, not a latency check)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_gate_allows_warns_then_blocks(tansu, worker):
    async with client_for(tansu, worker) as client:
        run = client.run("agent-g", session_id="s-g", run_id=rid("gate"))
        actions, decisions = [], []
        for _ in range(14):
            d = await run.check("read", {"path": "notes.md"}, timeout=10.0)
            assert d.source == "verdict", d
            decisions.append(d)
            actions.append(d.action)
            result = d.blocked_result() if not d.proceed else {"content": [{"type": "text", "text": "same"}]}
            await run.tool_result(d, result=result)
        # warning at count 10 (the bucket rule emits it once), block at 12 identical outcomes;
        # the blocked call is not recorded, so an identical retry is blocked again.
        assert actions == ["allow"] * 10 + ["warn", "allow", "block", "block"]
        warn, block = decisions[10], decisions[12]
        assert warn.verdict.detector == "generic_repeat" and warn.verdict.level == "warning"
        assert warn.message.startswith(WARN_TEXT) and warn.verdict.count == 10
        assert block.verdict.detector == "generic_repeat" and block.verdict.level == "critical"
        assert block.message.startswith(BLOCK_TEXT) and block.verdict.count == 12
        for d in decisions:  # correlated by run + tool_call_id
            assert d.verdict.tool_call_id == d.call.tool_call_id and d.verdict.run_id == run.ref.run_id
        veto = block.blocked_result()
        assert veto == blocked_tool_result(block.message) and is_blocked_result(veto)
        assert veto["details"] == {"status": "blocked", "deniedReason": "tool-loop", "reason": block.message}
        assert veto["content"] == [{"type": "text", "text": block.message}]
        s = client.stats
        assert (s.checks, s.allowed, s.warned, s.blocked, s.fail_open) == (14, 11, 1, 2, 0)
        # a gate consumes its verdict: nothing is left pending for the run
        assert run.state.pending_block is None and not run.state.warnings


async def test_runner_sees_only_its_own_runs(tansu, worker):
    async with client_for(tansu, worker) as looper, client_for(tansu, worker) as quiet:
        loop_runs = [looper.run("agent-loop", run_id=rid("loop")) for _ in range(2)]
        own = [quiet.run("agent-quiet", run_id=rid("quiet")) for _ in range(2)]
        seen_by_quiet: list[Verdict] = []
        for run in own:
            run.on_verdict(seen_by_quiet.append)
        iterated: list[Verdict] = []

        async def iterate():
            async for v in own[0].verdicts():
                iterated.append(v)

        reader = asyncio.create_task(iterate())
        # Fire-and-forget (no gate): the looper's calls run, and its verdicts arrive afterwards.
        for _ in range(13):
            for run in loop_runs:
                call = await run.tool_call("exec", {"cmd": "make test"})
                await run.tool_result(call, result={"content": [{"type": "text", "text": "FAIL"}]})
        for i in range(3):  # the quiet runner's runs make progress
            for run in own:
                d = await run.check("read", {"path": f"file-{i}.md"}, timeout=10.0)
                assert d.action == "allow" and d.source == "verdict"
                await run.tool_result(d, result={"content": [{"type": "text", "text": f"text {i}"}]})
        await until(lambda: all(r.state.pending_block is not None for r in loop_runs))

        for run in loop_runs:  # one warning at count 10, the block at count 12: remembered for the next call
            assert [w.count for w in run.state.warnings] == [10]
            assert run.state.pending_block.message.startswith("CRITICAL: Called exec")
            d = await run.check("exec", {"cmd": "something else"})
            assert (d.action, d.source) == ("block", "pending_block")
            assert run.state.pending_block is None
        await until(lambda: len(iterated) == 3)
        own_keys = {r.key for r in own}
        assert {v.run_id for v in seen_by_quiet} == own_keys
        assert all(v.action == "allow" for v in seen_by_quiet) and len(seen_by_quiet) == 6
        assert [v.run_id for v in iterated] == [own[0].key] * 3
        assert quiet.stats.foreign_dropped >= 4  # it read the looper's verdicts and dropped them
        assert quiet.stats.verdicts_delivered == 6
        await own[0].end()  # ends the iterator
        await asyncio.wait_for(reader, 10)


async def test_repeated_verdict_ids_are_dropped(tansu, worker):
    """A verdict re-delivered after a worker crash carries the same verdict_id: delivered once."""
    async with client_for(tansu, worker) as client:
        run = client.run("agent-d", run_id=rid("dup"))
        got: list[Verdict] = []
        run.on_verdict(got.append)
        verdict = Verdict(
            verdict_id=f"{worker.names.events}:0:7:0",
            action="warn",
            agent_id="agent-d",
            run_id=run.key,
            level="warning",
            detector="generic_repeat",
            count=10,
            message="WARNING: test",
            tool_name="read",
            event_ts=time.time(),  # as a worker's: the time of the event it answers, during this run
        )
        producer = AIOKafkaProducer(bootstrap_servers=tansu)
        await producer.start()
        try:
            for _ in range(3):
                await producer.send_and_wait(worker.names.control, msgspec.json.encode(verdict), key=run.key.encode())
            other = msgspec.structs.replace(verdict, verdict_id=f"{worker.names.events}:0:8:0")
            await producer.send_and_wait(worker.names.control, msgspec.json.encode(other), key=run.key.encode())
        finally:
            await producer.stop()
        # same key, same partition: once the last one is here, the repeats before it were read too
        await until(lambda: any(v.verdict_id == other.verdict_id for v in got))
        assert [v.verdict_id for v in got] == [verdict.verdict_id, other.verdict_id]
        assert client.stats.duplicates_dropped == 2
        assert len(run.state.warnings) == 2


async def test_compaction_loop_ends_in_abort(tansu, worker):
    async with client_for(tansu, worker) as client:
        run = client.run("agent-c", session_id="s-c", run_id=rid("compact"))
        verdicts = run.verdicts()
        await run.compaction_retry("context overflow")
        for _ in range(3):  # windowSize 3: the same call and result three times after compaction
            d = await run.check("exec", {"cmd": "cat huge.log"}, timeout=10.0)
            assert d.action == "allow"
            await run.tool_result(d, result={"content": [{"type": "text", "text": "same output"}]})
        async with asyncio.timeout(30):
            async for v in verdicts:
                if v.action == "abort":
                    break
        assert v.detector == "compaction_loop_persisted" and v.count == 3 and v.level == "critical"
        assert run.aborted is v
        d = await run.check("exec", {"cmd": "anything"})
        assert (d.action, d.source) == ("abort", "aborted") and not d.proceed
        assert is_blocked_result(d.blocked_result())


async def test_fails_open_when_the_broker_stops(tmp_path):
    from loopwarden.kafka.admin import ensure_topics
    from loopwarden.worker.settings import Settings

    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    try:
        names = Names("failopen")
        await ensure_topics(
            Settings(
                broker=broker.url,
                events_topic=names.events,
                control_topic=names.control,
                config_topic=names.config,
                dead_letter_topic=names.dead_letter,
            )
        )
        client = LoopClient(
            bootstrap=broker.bootstrap,
            events_topic=names.events,
            control_topic=names.control,
            request_timeout_ms=1500,
            close_timeout=1.0,
        )
        await client.start()
        assert client.listening
        run = client.run("agent-f", run_id=rid("open"))
        # no worker: nobody answers -> allowed after the timeout
        d = await asyncio.wait_for(run.check("read", {"path": "x"}, timeout=0.5), 10)
        assert (d.action, d.source) == ("allow", "timeout") and d.failed_open
        await broker.astop()
        for i in range(2):  # broker gone: still allowed, within a bounded wait
            d = await asyncio.wait_for(run.check("read", {"path": f"y{i}"}, timeout=1.0), 10)
            assert d.action == "allow" and d.source in ("timeout", "error") and d.proceed
        assert client.stats.fail_open == 3 and client.stats.allowed == 3
        await asyncio.wait_for(client.close(), 15)
    finally:
        broker.stop()


async def test_toy_agent_is_blocked_end_to_end(tansu, worker):
    path = Path(__file__).resolve().parents[1] / "examples" / "toy_agent.py"
    spec = importlib.util.spec_from_file_location("toy_agent", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    async with client_for(tansu, worker) as client:
        transcript = await module.toy_agent(client, agent_id="toy")
    actions = [a for a, _ in transcript]
    assert actions[-1] == "block" and "warn" in actions and "model-sees-warning" in actions
    assert transcript[-1][1].startswith("CRITICAL: Called web_fetch")
