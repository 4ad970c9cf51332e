"""The run table's writes: a long state flush lets the event loop run in between."""

from __future__ import annotations

import asyncio

from loopwarden.worker.runtable import YIELD_EVERY, RunTable


class _DB(dict):
    def put(self, key, value):
        self[key] = value

    def delete(self, key):
        self.pop(key, None)


class _RocksStore:
    """What RunTable reads of Faust's RocksDB store."""

    def __init__(self) -> None:
        self.dbs: dict[int, _DB] = {}
        self.persisted: dict = {}

    def _db_for_partition(self, partition: int) -> _DB:
        return self.dbs.setdefault(partition, _DB())

    def set_persisted_offset(self, tp, offset) -> None:
        self.persisted[tp] = offset


class _Table:
    changelog_topic_name = "app-runs-changelog"

    def __init__(self) -> None:
        self.data = _RocksStore()


def test_a_long_write_lets_other_tasks_run_and_stores_everything():
    table = _Table()
    sent = []

    async def send(topic, key, value, partition):
        sent.append((topic, key, partition))
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(type("Meta", (), {"offset": len(sent) - 1})())
        return fut

    async def go():
        runtable = RunTable(table, "agent.events", send)
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        other = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        before = ticks
        n = 5 * YIELD_EVERY
        await runtable.write([(i % 2, f"k{i}".encode(), b"v") for i in range(n)])
        during = ticks - before
        other.cancel()
        await asyncio.sleep(0)
        return during

    during = asyncio.run(go())
    assert during >= 4  # the other task ran while the write went on (not only before and after it)
    assert len(sent) == 5 * YIELD_EVERY and sum(len(db) for db in table.data.dbs.values()) == 5 * YIELD_EVERY
    assert sorted(tp.partition for tp in table.data.persisted) == [0, 1]  # the last changelog offset per partition
