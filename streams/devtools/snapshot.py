"""The embedded broker's records, kept in a folder between two ``loopwarden up``.

Tansu here stores topics in memory only, so a restarted broker is empty,
while the worker's RocksDB state (kept in ``--data-dir``) remembers offsets
of the old topics: its changelog position and, per run, the last applied
event offset. Put back as they were, the records get their old offsets
again (a memory topic starts at 0 and never compacts, and each partition's
records are produced in order), so the worker's state matches the topics:
run histories, live config overrides and open incidents carry on. Consumer
group offsets are not put back (Tansu accepts a commit only from a member of
the group's own protocol): the worker reads the events again from the start
and skips, per run, what its state says it applied; a run that ended more
than ``--ended-ttl`` ago is processed again and its verdicts published again
with their old ``verdict_id``, which runners drop.

The file: one msgpack document, :class:`Snapshot`. Saved after the worker
stopped (nothing is written meanwhile), restored before it starts, and then
removed by ``up``: a session that does not stop cleanly saves none, and the
next ``up`` starts its worker afresh rather than on state that remembers
records the broker no longer has. Topic
configs are not kept (Tansu's memory engine applies none).
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
    records: list[Record]


class Snapshot(msgspec.Struct, kw_only=True):
    topics: list[Topic]


class BrokerSnapshot:
    """Save a broker's topics to ``path``, and put them back on an empty broker."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @property
    def file(self) -> Path:
        return self.path / FILE

    def save(self, bootstrap: str) -> int:
        """Write every topic's records; the number of records."""
        snap = asyncio.run(read_broker(bootstrap))
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.file.with_suffix(".tmp")
        tmp.write_bytes(msgspec.msgpack.encode(snap))
        os.replace(tmp, self.file)  # a save cut short keeps the previous snapshot
        return sum(len(t.records) for t in snap.topics)

    def restore(self, bootstrap: str) -> int:
        """Put the saved records on the (empty) broker; the number of records (0: none saved)."""
        if not self.file.is_file():
            return 0
        snap = msgspec.msgpack.decode(self.file.read_bytes(), type=Snapshot)
        asyncio.run(write_broker(bootstrap, snap))
        return sum(len(t.records) for t in snap.topics)


async def read_broker(bootstrap: str) -> Snapshot:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="loopwarden-snapshot")
    # one assignment of every partition and short fetch waits: topic by topic, each reassignment
    # restarted the fetcher and waited out a fetch (about a second per topic, 15 s for a stop)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, client_id="loopwarden-snapshot", fetch_max_wait_ms=10
    )
    await admin.start()
    await consumer.start()
    try:
        names = sorted(name for name in await admin.list_topics() if not name.startswith("__"))  # not the broker's
        # partition counts first: once the consumer is assigned, its metadata covers those topics only
        counts = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(names)} if names else {}
        tps = [TopicPartition(name, p) for name in names for p in range(counts.get(name, 0))]
        records: dict[str, list[Record]] = {name: [] for name in names}
        if tps:
            ends = await consumer.end_offsets(tps)
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            todo = {tp for tp in tps if ends[tp] > 0}
            while todo:
                batch = await consumer.getmany(*todo, timeout_ms=1000)
                for tp, msgs in batch.items():
                    records[tp.topic] += [
                        Record(tp.partition, m.key, m.value, m.timestamp, list(m.headers or ())) for m in msgs
                    ]
                for tp in list(todo):
                    # Tansu's end offsets can stop short of the log end; a fetch's high watermark does not
                    if await consumer.position(tp) >= max(ends[tp], consumer.highwater(tp) or 0):
                        todo.discard(tp)
        return Snapshot(
            topics=[Topic(name=name, partitions=counts.get(name, 0), records=records[name]) for name in names]
        )
    finally:
        await consumer.stop()
        await admin.close()


async def write_broker(bootstrap: str, snap: Snapshot) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="loopwarden-snapshot")
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        for t in snap.topics:
            if t.name not in existing:
                await admin.create_topics([NewTopic(t.name, t.partitions, 1)])
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
