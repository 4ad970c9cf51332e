"""The embedded broker's records, kept in a folder between two ``loopwarden up``.

Tansu here stores topics in memory only, so a restarted broker is empty,
while the worker's RocksDB state (kept in ``--data-dir``) remembers offsets
of the old topics: its changelog position and, per run, the last applied
event offset. Put back as they were, the records get their old offsets
again (a memory topic starts at 0 and never compacts, and each partition's
records are produced in order, one in flight at a time), and with the
consumer groups' committed offsets the worker carries on where it stopped:
run histories, live config overrides and open incidents included.

The file: one msgpack document, :class:`Snapshot`. Saved after the worker
stopped (nothing is written meanwhile), restored before it starts.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import msgspec

FILE = "records.msgpack"


class Record(msgspec.Struct, array_like=True):
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: list[tuple[str, bytes]]


class Topic(msgspec.Struct, kw_only=True):
    name: str
    partitions: int
    configs: dict[str, str]
    records: list[Record]


class GroupOffsets(msgspec.Struct, kw_only=True):
    group: str
    offsets: list[tuple[str, int, int]]  # (topic, partition, next offset)


class Snapshot(msgspec.Struct, kw_only=True):
    topics: list[Topic]
    groups: list[GroupOffsets]


class BrokerSnapshot:
    """Save a broker's topics and group offsets to ``path``, and put them back on an empty broker."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @property
    def file(self) -> Path:
        return self.path / FILE

    def save(self, bootstrap: str) -> int:
        """Write every topic's records and every group's offsets; the number of records."""
        snap = asyncio.run(read_broker(bootstrap))
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_suffix(".tmp")
        tmp.write_bytes(msgspec.msgpack.encode(snap))
        os.replace(tmp, self.file)  # a save cut short keeps the previous snapshot
        return sum(len(t.records) for t in snap.topics)

    def restore(self, bootstrap: str) -> int:
        """Put the saved records and offsets on the (empty) broker; the number of records (0: none saved)."""
        if not self.file.is_file():
            return 0
        snap = msgspec.msgpack.decode(self.file.read_bytes(), type=Snapshot)
        asyncio.run(write_broker(bootstrap, snap))
        return sum(len(t.records) for t in snap.topics)


async def read_broker(bootstrap: str) -> Snapshot:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="loopwarden-snapshot")
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, client_id="loopwarden-snapshot")
    await admin.start()
    await consumer.start()
    try:
        topics: list[Topic] = []
        for name in sorted(await consumer.topics()):
            if name.startswith("__"):
                continue  # the broker's own
            parts = sorted(consumer.partitions_for_topic(name) or ())
            tps = [TopicPartition(name, p) for p in parts]
            records: list[Record] = []
            if tps:
                ends = await consumer.end_offsets(tps)
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                todo = {tp for tp in tps if ends[tp] > 0}
                while todo:
                    batch = await consumer.getmany(*todo, timeout_ms=1000)
                    for tp, msgs in batch.items():
                        records += [
                            Record(tp.partition, m.key, m.value, m.timestamp, list(m.headers or ())) for m in msgs
                        ]
                        if await consumer.position(tp) >= ends[tp]:
                            todo.discard(tp)
            topics.append(Topic(name=name, partitions=len(parts), configs={}, records=records))
        groups = []
        for group_id, _protocol in await admin.list_consumer_groups():
            offsets = await admin.list_consumer_group_offsets(group_id)
            groups.append(
                GroupOffsets(
                    group=group_id,
                    offsets=[(tp.topic, tp.partition, meta.offset) for tp, meta in offsets.items() if meta.offset >= 0],
                )
            )
        return Snapshot(topics=topics, groups=groups)
    finally:
        await consumer.stop()
        await admin.close()


async def write_broker(bootstrap: str, snap: Snapshot) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.structs import OffsetAndMetadata

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="loopwarden-snapshot")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        for t in snap.topics:
            if t.name not in existing:
                await admin.create_topics([NewTopic(t.name, t.partitions, 1, topic_configs=t.configs)])
    finally:
        await admin.close()
    # one request in flight per partition keeps each partition's order, hence its offsets
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        for t in snap.topics:
            pending = [
                await producer.send(
                    t.name,
                    r.value,
                    key=r.key,
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                    headers=r.headers or None,
                )
                for r in t.records
            ]
            if pending:
                await asyncio.gather(*pending)
    finally:
        await producer.stop()
    for g in snap.groups:
        if not g.offsets:
            continue
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=g.group, enable_auto_commit=False)
        await consumer.start()
        try:
            tps = {TopicPartition(topic, p): OffsetAndMetadata(offset, "") for topic, p, offset in g.offsets}
            consumer.assign(list(tps))
            await consumer.commit(tps)
        finally:
            await consumer.stop()
