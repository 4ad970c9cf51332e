"""Partition-explicit access to the Faust run table.

Faust picks a table key's RocksDB file and changelog partition from the
*current event*. A batch holds events of several partitions, so here every
access names its source partition instead.

With the RocksDB store (the default) reads and writes go straight to the
partition's RocksDB file, and each write is sent to the changelog topic
through the app's producer without waiting, one record per run per batch.
Faust's per-key path (a buffered future, a RocksDB write of the changelog
offset after every record) costs ~10x more per write. Durability is the
same: Faust flushes the producer before it commits input offsets, and the
changelog offset of each partition's last write is stored as Faust stores
it, so recovery after a restart reads the changelog from there on. Other
stores (``memory://``) use the plain Table API under a stand-in current
event. The private store attributes used are stable in faust-streaming < 0.16.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Awaitable, Callable, Iterator

from faust.streams import _current_event
from faust.types import TP

SendFn = Callable[..., Awaitable[Any]]  # (topic, key, value, partition) -> delivery future


class _Message:
    __slots__ = ("topic", "partition")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition


class _PartitionEvent:
    """What Faust's table reads from ``current_event()``: ``.message.topic`` and ``.message.partition``."""

    __slots__ = ("message", "__weakref__")

    def __init__(self, topic: str, partition: int) -> None:
        self.message = _Message(topic, partition)


class RunTable:
    def __init__(self, table: Any, source_topic: str, send: SendFn | None = None) -> None:
        self.table = table
        self.source_topic = source_topic
        self.send = send
        self._events: dict[int, _PartitionEvent] = {}
        store = table.data if send is not None else None
        self._rocks = store if store is not None and hasattr(store, "_db_for_partition") else None

    @contextlib.contextmanager
    def partition(self, partition: int) -> Iterator[None]:
        event = self._events.get(partition)
        if event is None:
            event = self._events[partition] = _PartitionEvent(self.source_topic, partition)
        token = _current_event.set(weakref.ref(event))
        try:
            yield
        finally:
            _current_event.reset(token)

    def get(self, partition: int, key: bytes) -> bytes | None:
        if self._rocks is not None:
            return self._rocks._db_for_partition(partition).get(key)
        with self.partition(partition):
            return self.table.get(key)

    async def write(self, items: list[tuple[int, bytes, bytes | None]]) -> None:
        """Store ``(partition, key, value)`` (``None`` deletes) locally and in the changelog."""
        store = self._rocks
        if store is None:
            for partition, key, value in items:
                with self.partition(partition):
                    if value is None:
                        self.table.pop(key, None)
                    else:
                        self.table[key] = value
            return
        topic = self.table.changelog_topic_name
        last: dict[int, Any] = {}
        for partition, key, value in items:
            db = store._db_for_partition(partition)
            if value is None:
                db.delete(key)
            else:
                db.put(key, value)
            last[partition] = await self.send(topic, key, value, partition)
        for partition, future in last.items():
            future.add_done_callback(self._persisted(store, TP(topic, partition)))

    @staticmethod
    def _persisted(store: Any, tp: TP) -> Callable[[Any], None]:
        def done(future: Any) -> None:
            if not future.cancelled() and future.exception() is None:
                store.set_persisted_offset(tp, future.result().offset)

        return done

    def owned_items(self, owned_partitions: set[int]) -> Iterator[tuple[int, bytes, bytes]]:
        """``(partition, key, value)`` of the table partitions this worker owns (RocksDB store)."""
        store = self.table.data
        dbs = getattr(store, "_dbs", None)
        if dbs is None:  # memory store: one dict, partitions unknown
            return
        for partition, db in list(dbs.items()):
            if partition not in owned_partitions:
                continue
            for key, value in list(store._visible_items(db)):
                yield partition, key, value
