"""The gate benchmark's stack takes the worker's flags (``bench all -- --partitions 1``)."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer

from loopwarden.bench.latency import _stack_parts

pytestmark = pytest.mark.integration


def test_gate_stack_topics_follow_the_worker_flags():
    async def go() -> tuple[set[int], set[int], dict]:
        async with _stack_parts(["--partitions", "1"]) as (clients, meter):  # the worker is ready in here
            s = clients.settings
            await clients("idle-runner")  # its listener polls the control topic
            meter.mark()
            await asyncio.sleep(1.5)
            idle = meter.percent()  # what Level.idle_cpu reports: no calls, only the consumers' fetch loops
            consumer = AIOKafkaConsumer(bootstrap_servers=s.bootstrap)
            await consumer.start()
            try:
                await consumer.topics()  # fetches the cluster's metadata
                return (
                    set(consumer.partitions_for_topic(s.events_topic) or ()),
                    set(consumer.partitions_for_topic(s.control_topic) or ()),
                    idle,
                )
            finally:
                await consumer.stop()

    events, control, idle = asyncio.run(go())
    assert (events, control) == ({0}, {0})  # one partition each, as asked (the default is 4)
    # The broker works while nothing is sent: every consumer's fetch loop costs it (streams/bench/BENCHMARKS.md).
    assert idle["broker"] > 0 and idle["worker"] > 0, idle
