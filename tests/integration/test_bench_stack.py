"""The gate benchmark's stack takes the worker's flags (``bench all -- --partitions 1``)."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer

from streams.bench.latency import _stack_parts


def test_gate_stack_topics_follow_the_worker_flags():
    async def go() -> tuple[set[int], set[int]]:
        async with _stack_parts(["--partitions", "1"]) as (clients, _meter):  # the worker is ready in here
            s = clients.settings
            consumer = AIOKafkaConsumer(bootstrap_servers=s.bootstrap)
            await consumer.start()
            try:
                await consumer.topics()  # fetches the cluster's metadata
                return (set(consumer.partitions_for_topic(s.events_topic) or ()),
                        set(consumer.partitions_for_topic(s.control_topic) or ()))
            finally:
                await consumer.stop()

    assert asyncio.run(go()) == ({0}, {0})  # one partition each, as asked (the default is 4)
