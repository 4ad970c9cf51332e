"""The worker's record producer puts a keyed record where aiokafka's default partitioner would.

It remembers each key's partition instead of hashing the key again for every verdict; compared
here, on the broker, with what a plain aiokafka producer picks for the same keys.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer

from loopwarden.kafka.admin import ensure_topics
from loopwarden.kafka.producer import RecordProducer
from loopwarden.worker.settings import from_sources

pytestmark = pytest.mark.integration


def test_a_keyed_record_lands_where_aiokafka_itself_would_put_it(tansu, names):
    keys = [f"agent-{i}|run-{i % 7}".encode() for i in range(40)]
    settings = from_sources(
        {
            "broker": f"kafka://{tansu}",
            "partitions": 5,
            "control_topic": names.control,
            "events_topic": names.events,
            "shadow_topic": names.shadow,
            "dead_letter_topic": names.dead_letter,
        },
        environ={},
    )

    async def go() -> None:
        await ensure_topics(settings)
        topic = settings.control_topic
        ours = RecordProducer(settings)
        plain = AIOKafkaProducer(bootstrap_servers=tansu)
        await plain.start()
        try:
            assert len(await plain.partitions_for(topic)) == 5
            for key in keys * 2:  # the second round answers from the memo
                mine = await (await ours.send(topic, key, b"{}"))
                theirs = await (await plain.send(topic, b"{}", key=key))
                assert mine.partition == theirs.partition, key
            assert len(ours.partitions._partitions) == len(keys)
            assert len(set(ours.partitions._partitions.values())) > 1  # spread, not one partition
        finally:
            await plain.stop()
            await ours.stop()

    asyncio.run(go())
