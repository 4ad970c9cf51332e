"""The expiry sweep: idle runs dropped a chunk at a time, never a run that a batch has just touched."""

from __future__ import annotations

import asyncio
import time

from loopwarden.detection.state import RunState
from loopwarden.schemas.config import FleetConfig
from loopwarden.worker.metrics import Metrics
from loopwarden.worker.processor import RunProcessor
from loopwarden.worker.runcodec import RunValue, decode_value, encode_value
from loopwarden.worker.settings import Settings
from tests.support.helpers import MemRunTable


def idle(i: int, touched: float = 0.0) -> tuple[tuple[int, bytes], RunValue]:
    return (0, f"run-{i}".encode()), RunValue(offset=i, touched=touched, state=RunState())


def processor(table: MemRunTable) -> RunProcessor:
    return RunProcessor(Settings(run_ttl=10.0), Metrics(), table, None, lambda: FleetConfig())


def test_a_sweep_releases_the_batch_lock_between_chunks():
    table = MemRunTable({slot: encode_value(v) for slot, v in (idle(i) for i in range(5000))})
    proc = processor(table)
    turns = []

    async def batches():
        while True:
            async with proc.lock:
                turns.append(len(table.data))
            await asyncio.sleep(0)

    async def go():
        other = asyncio.ensure_future(batches())
        await asyncio.sleep(0)
        result = await proc.expire({0}, now=100.0, chunk=1000)
        other.cancel()
        return result

    assert asyncio.run(go()) == (5000, 0)
    assert table.data == {}
    assert {4000, 3000, 2000, 1000} <= set(turns)  # a batch got the lock after each chunk


def test_a_run_written_after_the_scan_began_is_not_dropped():
    table = MemRunTable({slot: encode_value(v) for slot, v in (idle(i) for i in range(3000))})
    proc = processor(table)
    fresh = encode_value(RunValue(offset=99, touched=95.0, state=RunState()))

    async def go():
        async def touch_late_run():
            while len(table.data) == 3000:  # once the first chunk is gone: run-2500 was in the snapshot as idle
                await asyncio.sleep(0)
            table.data[(0, b"run-2500")] = fresh  # a batch's flush: the run is alive again

        toucher = asyncio.ensure_future(touch_late_run())
        result = await proc.expire({0}, now=100.0, chunk=1000)
        await toucher
        return result

    expired, active = asyncio.run(go())
    assert (expired, active) == (2999, 1)
    assert list(table.data) == [(0, b"run-2500")] and decode_value(table.data[(0, b"run-2500")]).offset == 99


def test_runs_with_values_not_yet_flushed_stay_and_count_as_active():
    slot, value = idle(1)
    table = MemRunTable({slot: encode_value(value)})
    proc = processor(table)
    proc.committer.pending[slot] = RunValue(offset=5, touched=99.0, state=RunState())  # staged, not flushed
    assert asyncio.run(proc.expire({0}, now=100.0)) == (0, 1)
    assert slot in table.data


def test_active_runs_follow_batches_between_sweeps():
    """``loopwarden_active_runs`` was set by the sweep alone (every 30 s by default): right after a fill a
    worker read 0. Runs started and ended by batches now move each partition's count at once; a sweep
    recounts the owned partitions, and a partition never swept is reported as due for one."""
    import json

    from loopwarden.schemas.events import key_for
    from tests.support.helpers import Rec

    def rec(partition: int, offset: int, run: str, kind: str = "tool_call") -> Rec:
        event = {"type": kind, "agent_id": "a", "run_id": run}
        if kind == "tool_call":
            event |= {"tool_name": "read", "tool_call_id": f"{run}-{offset}", "params": {"p": offset}}
        return Rec("ev", partition, offset, key_for("a", None, run).encode(), json.dumps(event).encode())

    table = MemRunTable({})
    proc = RunProcessor(Settings(state_flush_interval=0.0), Metrics(), table, None, lambda: FleetConfig())

    async def go():
        assert proc.uncounted({0, 1}) == {0, 1}
        await (await proc.process([rec(0, 9, "early")]))  # before any sweep: its runs from before are unknown
        assert proc.uncounted({0, 1}) == {0, 1}
        await proc.expire({0, 1}, now=time.time())
        assert proc.active_runs({0, 1}) == 1
        table.data.clear()
        proc.recount()  # a rebalance
        await proc.expire({0, 1}, now=time.time())
        assert proc.active_runs({0, 1}) == 0
        await (await proc.process([rec(0, i, f"r{i}") for i in range(3)] + [rec(1, 0, "s0"), rec(1, 1, "s0")]))
        assert proc.active_runs({0, 1}) == 4 and proc.active_runs({1}) == 1
        await (await proc.process([rec(0, 3, "r0", "run_end"), rec(0, 4, "r1")]))  # one ends, one goes on
        assert proc.active_runs({0, 1}) == 3
        await proc.expire({0, 1}, now=time.time())
        assert proc.active_runs({0, 1}) == 3 and proc.uncounted({0, 1}) == set()
        await proc.expire({1}, now=time.time())  # partition 0 moved away: forgotten, due again if it comes back
        assert proc.active_runs({0, 1}) == 1 and proc.uncounted({0, 1}) == {0}

    asyncio.run(go())


def _event(partition: int, offset: int, run: str, kind: str = "tool_call"):
    import json

    from loopwarden.schemas.events import key_for
    from tests.support.helpers import Rec

    event = {"type": kind, "agent_id": "a", "run_id": run}
    if kind == "tool_call":
        event |= {"tool_name": "read", "tool_call_id": f"{run}-{offset}", "params": {"p": offset}}
    return Rec("ev", partition, offset, key_for("a", None, run).encode(), json.dumps(event).encode())


def _alive_now(proc: RunProcessor, table: MemRunTable, partitions: set[int]) -> int:
    """Runs with state as a reader sees them: ``pending`` over the table."""
    slots = {slot for slot in table.data if slot[0] in partitions} | {
        s for s in proc.committer.pending if s[0] in partitions
    }
    return sum(v is not None and v.state is not None for v in (proc.committer.read(*slot) for slot in slots))


def test_a_sweep_counts_the_runs_staged_but_not_yet_flushed():
    """A sweep that came between a fill's batches and their state flush listed an empty table and
    counted 0; the batches had moved no count either (no sweep had counted the partition), so
    ``loopwarden_active_runs`` read 0 until the next sweep (CI: ``active runs [0.0, 1469.0] != 3000``)."""
    table = MemRunTable({})
    proc = RunProcessor(Settings(state_flush_interval=3600.0), Metrics(), table, None, lambda: FleetConfig())

    async def go():
        durable = await proc.process([_event(p, i, f"r{p}-{i}") for p in (0, 1) for i in range(5)])
        assert not table.data and len(proc.committer.pending) == 10  # staged, not flushed
        assert await proc.expire({0, 1}, now=time.time()) == (0, 10)
        assert proc.active_runs({0, 1}) == 10 and proc.uncounted({0, 1}) == set()
        proc.committer.flush_now(always=True)
        await durable
        assert table.data and proc.active_runs({0, 1}) == 10

    asyncio.run(go())


def test_a_sweep_count_is_exact_while_batches_run_between_its_chunks():
    """Batches between the chunks start runs in partitions the scan has read and in those it has
    not, end runs and flush: the sweep's count equals what the table and ``pending`` hold."""
    stored = {
        (p, f"old-{p}-{i}".encode()): encode_value(RunValue(offset=i, touched=time.time(), state=RunState()))
        for p in (0, 1, 2)
        for i in range(6)
    }
    table = MemRunTable(stored)
    proc = RunProcessor(Settings(state_flush_interval=0.0), Metrics(), table, None, lambda: FleetConfig())
    owned = {0, 1, 2}

    async def go():
        sweep = asyncio.ensure_future(proc.expire(owned, now=time.time(), chunk=1))
        durables, turn = [], 0
        while not sweep.done():
            p = turn % 3
            batch = [_event(p, 100 + turn, f"new-{turn}"), _event((p + 1) % 3, 200 + turn, f"also-{turn}")]
            if turn % 4 == 3:
                batch.append(_event(p, 300 + turn, f"new-{turn - 3}", "run_end"))
            durables.append(await proc.process(batch))
            turn += 1
            await asyncio.sleep(0)
        _expired, active = await sweep
        assert turn > 10  # the batches did interleave with the chunks
        assert active == _alive_now(proc, table, owned)
        assert proc.active_runs(owned) == _alive_now(proc, table, owned)
        for durable in durables:
            await durable
        more = await proc.process([_event(0, 999, "late")])
        await more
        assert proc.active_runs(owned) == _alive_now(proc, table, owned)

    asyncio.run(go())
