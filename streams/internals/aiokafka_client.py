"""aiokafka internals the runner's verdict listener needs (fenced here; no Faust import).

Private names used (aiokafka < 0.15; checked by tests/internals/test_internals_contract.py):
``AIOKafkaConsumer._client`` (``fetch_all_metadata``, ``close``) and
``Fetcher._pending_tasks`` (via ``AIOKafkaConsumer._fetcher``), and
``BatchBuilder._buffer`` / ``_relative_offset`` (dev tools: a batch sent byte for byte).
"""

from __future__ import annotations

from typing import Any


async def fetch_all_metadata(consumer: Any) -> Any:
    """Fresh cluster metadata: aiokafka has no public "refresh this topic's partitions" call."""
    return await consumer._client.fetch_all_metadata()


def cancel_fetch_tasks(consumer: Any) -> None:
    """Cancel a stuck fetcher's tasks (aiokafka 0.14 leaves them when ``stop()`` is cancelled)."""
    fetcher = getattr(consumer, "_fetcher", None)
    for task in list(getattr(fetcher, "_pending_tasks", ())):
        task.cancel()


async def close_connections(consumer: Any) -> None:
    await consumer._client.close()


def raw_batch(producer: Any, data: bytes, records: int) -> Any:
    """A producer batch whose bytes are ``data`` as given (a dev tool's hostile records):
    ``BatchBuilder._buffer`` is what the sender sends once built, ``_relative_offset`` its record
    count (a batch counted empty is never sent)."""
    batch = producer.create_batch()
    batch._buffer = data
    batch._relative_offset = records
    return batch
