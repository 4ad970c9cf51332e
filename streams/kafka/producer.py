"""The worker's own producer for the records a runner or operator waits on.

Faust's producer also carries the run table's changelog, and aiokafka keeps
one produce request in flight per broker connection: a verdict handed over
while a state flush is on the wire waits for that whole request, and for
the next one if its batch is full. Verdicts, shadow detections, dead
letters and fleet signals therefore go through this producer, on a
connection of their own; the changelog stays on Faust's (which Faust
flushes before it commits offsets). The batch path awaits every delivery
of this producer before a batch is acked, so nothing here is acked early.
With a :class:`~loopwarden.kafka.signing.Signer`, records of its topics
leave signed (header ``lw-sig``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from loopwarden.kafka.connection import kafka_auth, servers
from loopwarden.kafka.signing import Signer

log = logging.getLogger(__name__)

PARTITION_MEMO = 65536  # keys whose partition is remembered; emptied wholesale when full


class PartitionMemo:
    """The default partitioner's choice for keyed records, remembered per key.

    aiokafka hashes every keyed record's key with murmur2 in Python (about 10 µs a record); all
    of a run's events and verdicts carry the run's key. Used by the worker's producer and the
    runner's outbox."""

    def __init__(self, size: int = PARTITION_MEMO) -> None:
        self.size = size
        self._partitioner = DefaultPartitioner()
        self._partitions: dict[tuple[str, bytes, int], int] = {}

    def partition(self, producer: AIOKafkaProducer, topic: str, key: bytes) -> int | None:
        """None while the topic's metadata is unknown (aiokafka then waits for it and partitions the
        record itself); a change in the partition count is a new entry."""
        parts = producer.client.cluster.partitions_for_topic(topic)
        if not parts:
            return None
        memo = self._partitions
        slot = (topic, key, len(parts))
        found = memo.get(slot)
        if found is None:
            if len(memo) >= self.size:
                memo.clear()
            found = memo[slot] = self._partitioner(key, sorted(parts), list(parts))
        return found


class RecordProducer:
    """Started on first use (a broker that is down at start is the committer's retry, not a crash)."""

    def __init__(self, settings: Any, client_id: str = "loopwarden-records", signer: Signer | None = None) -> None:
        self.settings = settings
        self.client_id = client_id
        self.signer = signer
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()
        self.partitions = PartitionMemo()

    def kwargs(self) -> dict[str, Any]:
        s = self.settings
        return dict(
            bootstrap_servers=servers(s.brokers),
            client_id=self.client_id,
            linger_ms=s.linger_ms,
            acks="all",
            enable_idempotence=False,
            max_request_size=s.producer_max_request_size,
            **kafka_auth(s),
        )

    async def send(self, topic: str, key: bytes | None, value: bytes, partition: int | None = None) -> Any:
        """Hand one record over; returns its delivery future."""
        producer = self._producer or await self._start()
        if partition is None and key is not None:
            partition = self.partitions.partition(producer, topic, key)
        headers = self.signer.headers(topic, key, value) if self.signer is not None else None
        return await producer.send(topic, value, key=key, partition=partition, headers=headers)

    async def _start(self) -> AIOKafkaProducer:
        async with self._lock:
            if self._producer is None:
                producer = AIOKafkaProducer(**self.kwargs())
                try:
                    await producer.start()
                except BaseException:
                    await producer.stop()
                    raise
                self._producer = producer
            return self._producer

    async def stop(self, timeout: float = 10.0) -> None:
        """Deliver what is queued (bounded: a broker that is gone cannot hold up the shutdown), then close."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            await asyncio.wait_for(producer.flush(), timeout)
        except (TimeoutError, Exception) as exc:
            log.warning("records not delivered at shutdown (they are replayed after the restart): %r", exc)
        await producer.stop()
