"""Partition-explicit access to a Faust table's RocksDB store (private Faust attributes, fenced here).

Faust picks a table key's RocksDB file and changelog partition from the
*current event* (a context variable). A batch holds events of several
partitions, so the run table names the partition itself: straight to the
partition's RocksDB file when the store is RocksDB, else the public Table
API under a stand-in current event. Private names used: ``faust.streams._current_event``,
``Store._db_for_partition``, ``Store._dbs``, ``Store._visible_items``
(faust-streaming < 0.16; checked by tests/internals/test_internals_contract.py).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from typing import Any

from faust.streams import _current_event


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


class PartitionEvents:
    """Stand-in current events, one per source partition, for the plain Table API."""

    def __init__(self, source_topic: str) -> None:
        self.source_topic = source_topic
        self._events: dict[int, _PartitionEvent] = {}

    @contextlib.contextmanager
    def current(self, partition: int) -> Iterator[None]:
        event = self._events.get(partition)
        if event is None:
            event = self._events[partition] = _PartitionEvent(self.source_topic, partition)
        token = _current_event.set(weakref.ref(event))
        try:
            yield
        finally:
            _current_event.reset(token)


def rocks_store(table: Any) -> Any | None:
    """The table's RocksDB store, or None for other stores (``memory://``)."""
    store = table.data
    return store if hasattr(store, "_db_for_partition") else None


def partition_db(store: Any, partition: int) -> Any:
    """The rocksdict handle of one table partition (opened on first use)."""
    return store._db_for_partition(partition)


def partition_listings(store: Any, partitions: set[int]) -> Iterator[tuple[int, list[tuple[bytes, bytes]]]]:
    """Each given partition with its ``(key, value)`` list, read when the iteration reaches it (one
    partition at a time, so a caller can tell the moment each was read); one not opened lists nothing."""
    for partition in sorted(partitions):
        db = store._dbs.get(partition)
        yield partition, [] if db is None else list(store._visible_items(db))


def partition_items(store: Any, partitions: set[int]) -> Iterator[tuple[int, bytes, bytes]]:
    """``(partition, key, value)`` of the given, already opened partitions."""
    for partition, listing in partition_listings(store, partitions):
        for key, value in listing:
            yield partition, key, value


def fetcher_service(app: Any) -> Any:
    """The app's Fetcher service (``App._fetcher``: no public accessor), for health checks."""
    return getattr(app, "_fetcher", None)
