"""Reading a whole topic from its start with a group-less consumer (config feed, incident board).

Every worker must see every record of these topics, so no consumer group:
wait until the topic's partitions are known, assign them all, seek to the
beginning.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def assign_from_start(consumer: Any, topic: str, poll: float = 0.5) -> list:
    """Assign every partition of ``topic`` (waiting for it to exist) at its first offset; the partitions."""
    from aiokafka import TopicPartition

    partitions = consumer.partitions_for_topic(topic)
    while not partitions:
        await consumer.topics()  # refreshes metadata
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            await asyncio.sleep(poll)
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    return tps
