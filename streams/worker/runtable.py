"""The run table: partition-explicit reads and writes of the Faust table ``runs``.

With the RocksDB store (the default) reads and writes go straight to the
partition's RocksDB file, and each write is sent to the changelog topic
through the app's producer without waiting, one record per run per batch.
Faust's per-key path (a buffered future, a RocksDB write of the changelog
offset after every record) costs ~10x more per write. Durability is the
same: Faust flushes the producer before it commits input offsets, and the
changelog offset of each partition's last write is stored as Faust stores
it, so recovery after a restart reads the changelog from there on. Other
stores (``memory://``) use the plain Table API. The Faust internals this
needs live in :mod:`loopwarden.internals.faust_table`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from faust.types import TP

from loopwarden.internals.faust_table import (
    PartitionEvents,
    partition_db,
    partition_items,
    partition_listings,
    rocks_store,
)

SendFn = Callable[..., Awaitable[Any]]  # (topic, key, value, partition) -> delivery future
YIELD_EVERY = 200  # writes between turns of the event loop during a long write


class RunTable:
    def __init__(self, table: Any, source_topic: str, send: SendFn | None = None) -> None:
        self.table = table
        self.send = send
        self._events = PartitionEvents(source_topic)
        self._rocks = rocks_store(table) if send is not None else None

    def get(self, partition: int, key: bytes) -> bytes | None:
        if self._rocks is not None:
            return partition_db(self._rocks, partition).get(key)
        with self._events.current(partition):
            return self.table.get(key)

    async def write(self, items: list[tuple[int, bytes, bytes | None]]) -> None:
        """Store ``(partition, key, value)`` (``None`` deletes) locally and in the changelog."""
        store = self._rocks
        if store is None:
            for partition, key, value in items:
                with self._events.current(partition):
                    if value is None:
                        self.table.pop(key, None)
                    else:
                        self.table[key] = value
            return
        topic = self.table.changelog_topic_name
        last: dict[int, Any] = {}
        for i, (partition, key, value) in enumerate(items, 1):
            db = partition_db(store, partition)
            if value is None:
                db.delete(key)
            else:
                db.put(key, value)
            last[partition] = await self.send(topic, key, value, partition)
            if i % YIELD_EVERY == 0:
                # A state flush can hold thousands of runs (tens of ms of sends): let the next batch
                # in between, so verdicts do not wait for the flush to finish.
                await asyncio.sleep(0)
        for partition, future in last.items():
            future.add_done_callback(self._persisted(store, TP(topic, partition)))

    @staticmethod
    def _persisted(store: Any, tp: TP) -> Callable[[Any], None]:
        def done(future: Any) -> None:
            if not future.cancelled() and future.exception() is None:
                store.set_persisted_offset(tp, future.result().offset)

        return done

    @property
    def scannable(self) -> bool:
        """Whether :meth:`owned_items` can list the runs (the RocksDB store; not ``memory://``)."""
        return rocks_store(self.table) is not None

    def owned_items(self, owned_partitions: set[int]) -> Iterator[tuple[int, bytes, bytes]]:
        """``(partition, key, value)`` of the table partitions this worker owns (RocksDB store only)."""
        store = rocks_store(self.table)
        if store is None:  # memory store: one dict, partitions unknown
            return iter(())
        return partition_items(store, owned_partitions)

    def owned_listings(self, owned_partitions: set[int]) -> Iterator[tuple[int, list[tuple[bytes, bytes]]]]:
        """Each owned partition with its ``(key, value)`` list, read as the iteration reaches it
        (RocksDB store only: the expiry sweep counts each partition as of that moment)."""
        store = rocks_store(self.table)
        if store is None:
            return iter(())
        return partition_listings(store, owned_partitions)
