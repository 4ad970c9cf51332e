"""Runners deciding locally, audited by a real worker on Tansu.

A runner restarted mid-run has lost the run's history: its local decisions
are laxer than the worker's, whose correction must block the run's next
call. A run decided locally from the start gets nothing on the control
topic: the worker publishes no ``allow`` and no verdict the runner already
made.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from loopwarden.runner import LoopClient
from tests.support.live import collect, ready_worker

pytestmark = pytest.mark.integration

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 12}}}


@pytest.fixture(scope="module")
def worker(tansu, tmp_path_factory):
    yield from ready_worker(tansu, tmp_path_factory.mktemp("audit-worker"), "audit", CONFIG)


def local_client(tansu: str, worker) -> LoopClient:
    names = worker.names
    return LoopClient(
        bootstrap=tansu,
        events_topic=names.events,
        control_topic=names.control,
        config_topic=names.config,
        config=CONFIG,
    )


async def until(predicate, timeout: float = 30.0) -> None:
    """A hang guard for what the worker drives, not a latency check."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def calls(run, n: int) -> list:
    out = []
    for _ in range(n):
        d = await run.check("read", {"path": "notes.md"})
        out.append(d)
        await run.tool_result(d, result=d.blocked_result() if not d.proceed else {"text": "same"})
    return out


async def test_runner_restarted_mid_run_is_corrected_by_the_worker(tansu, worker):
    run_id = f"restart-{uuid.uuid4().hex[:8]}"
    async with local_client(tansu, worker) as first:
        decided = await calls(first.run("agent-r", run_id=run_id), 8)
        assert {d.source for d in decided} == {"local"}
    # the runner restarts: a fresh client knows nothing of the run's 8 calls
    async with local_client(tansu, worker) as second:
        run = second.run("agent-r", run_id=run_id)
        # calls 9-13: the worker warns on call 11 (10 before it) and blocks call 13 (12 before it)
        decided = await calls(run, 5)
        assert [d.action for d in decided] == ["allow"] * 5  # the runner alone saw only these
        await until(lambda: run.state.pending_block is not None)  # the worker's block, for call 13
        assert second.stats.corrections == 2  # its warning (call 10) and its block
        d = await run.check("read", {"path": "notes.md"})
        assert (d.action, d.source) == ("block", "pending_block") and not d.proceed
        assert d.verdict.detector == "generic_repeat" and d.verdict.count == 12
        await run.tool_result(d, result=d.blocked_result())
        await run.end()


async def test_a_run_decided_locally_gets_nothing_on_the_control_topic(tansu, worker):
    """The runner's decisions agree with the worker's: no allow and no duplicate verdict is published
    for its run; the agreement is counted per agent."""
    run_id = f"quiet-{uuid.uuid4().hex[:8]}"
    before = worker.metrics().get('loopwarden_runner_decisions_total{agent="other",agreement="same"}', 0.0)
    async with local_client(tansu, worker) as client:
        run = client.run("agent-q", run_id=run_id)
        decided = await calls(run, 14)
        assert [d.action for d in decided] == ["allow"] * 10 + ["warn", "allow", "block", "block"]
        await run.ack(decided[10])
        await run.end()
        await asyncio.to_thread(
            worker.wait_metric, 'loopwarden_runner_decisions_total{agent="other",agreement="same"}', before + 14
        )
        control = await asyncio.to_thread(collect, tansu, worker.names.control, lambda r: True, 1.0, 10.0)
        assert [r for r in control if r.key == run_id.encode()] == []
        assert client.stats.verdicts_seen == 0
