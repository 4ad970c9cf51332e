"""``loopwarden bench broker``: what the embedded broker charges for consumers that only wait.

For each fetch wait and consumer count, on a fresh broker: that many consumers
poll a topic that gets no records, and the broker's CPU is read over the
window; then one consumer with the same wait reads records sent at random
intervals, and the hop's latency (send to receive) is reported. Tansu looks
for records a few times within every fetch wait instead of being woken by a
produce, so a shorter wait buys a shorter hop with broker CPU spent whether
or not anything is sent. These figures explain the idle share of the gate
benchmark's broker CPU (``bench latency``, ``idle_cpu``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from typing import Any

from loopwarden.bench.stats import percentile


async def _idle_cpu(bootstrap: str, topic: str, consumers: int, wait_ms: int, seconds: float, meter: Any) -> float:
    from aiokafka import AIOKafkaConsumer

    started = []
    for _ in range(consumers):
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            fetch_max_wait_ms=wait_ms,
            auto_offset_reset="latest",
            enable_auto_commit=False,
        )
        await c.start()
        started.append(c)

    async def poll(c: Any) -> None:
        while True:
            await c.getmany(timeout_ms=1000)

    tasks = [asyncio.create_task(poll(c)) for c in started]
    try:
        await asyncio.sleep(1.0)  # joined, positioned, polling
        meter.mark()
        await asyncio.sleep(seconds)
        return meter.percent()["broker"]
    finally:
        for t in tasks:
            t.cancel()
        for c in started:
            await c.stop()


async def _hop(bootstrap: str, topic: str, wait_ms: int, records: int, partitions: int) -> list[float]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        fetch_max_wait_ms=wait_ms,
        auto_offset_reset="latest",
        enable_auto_commit=False,
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await consumer.start()
    await producer.start()
    latencies: list[float] = []
    try:
        await consumer.getmany(timeout_ms=300)  # assigned and positioned before the first record

        async def read() -> None:
            while True:
                got = await consumer.getmany(timeout_ms=1000)
                now = time.time()
                latencies.extend(now - float(m.value) for msgs in got.values() for m in msgs)

        reader = asyncio.create_task(read())
        rnd = random.Random(1)
        for i in range(records):
            await producer.send_and_wait(topic, str(time.time()).encode(), partition=i % partitions)
            await asyncio.sleep(rnd.uniform(0.02, 0.08))  # not in step with the broker's own cadence
        await asyncio.sleep(2 * wait_ms / 1000 + 0.2)
        reader.cancel()
    finally:
        await consumer.stop()
        await producer.stop()
    return sorted(latencies)


def measure(waits: list[int], counts: list[int], partitions: int, seconds: float, records: int) -> dict:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from loopwarden.bench.stats import CpuMeter
    from loopwarden.devtools.broker import EmbeddedBroker

    rows = []
    for wait in waits:
        for n in counts:
            with EmbeddedBroker() as broker:

                async def go(n: int = n, wait: float = wait) -> tuple[float, list[float]]:
                    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
                    await admin.start()
                    try:
                        await admin.create_topics([NewTopic("idle", partitions, 1), NewTopic("hop", partitions, 1)])
                    finally:
                        await admin.close()
                    meter = CpuMeter({"broker": broker.process.pid})
                    cpu = await _idle_cpu(broker.bootstrap, "idle", n, wait, seconds, meter)
                    return cpu, await _hop(broker.bootstrap, "hop", wait, records, partitions)

                cpu, hop = asyncio.run(go())
            ms = [x * 1000 for x in hop]
            rows.append(
                {
                    "fetch_wait_ms": wait,
                    "consumers": n,
                    "partitions": partitions,
                    "idle_broker_cpu_pct": cpu,
                    "hop_records": len(ms),
                    "hop_p50_ms": round(percentile(ms, 0.5), 1),
                    "hop_p99_ms": round(percentile(ms, 0.99), 1),
                }
            )
    return {"rows": rows}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--waits", default="10,100", help="fetch waits to measure, ms (comma-separated)")
    p.add_argument("--consumers", default="1,5", help="idle consumer counts (comma-separated)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--seconds", type=float, default=4.0, help="idle window per row")
    p.add_argument("--records", type=int, default=60, help="records sent for the hop latency per row")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    ints = lambda text: [int(x) for x in text.split(",") if x.strip()]  # noqa: E731
    report = measure(ints(args.waits), ints(args.consumers), args.partitions, args.seconds, args.records)
    print("| fetch wait ms | idle consumers | broker CPU % (idle) | hop p50 ms | hop p99 ms |")
    print("|---|---|---|---|---|")
    for r in report["rows"]:
        print(
            f"| {r['fetch_wait_ms']} | {r['consumers']} | {r['idle_broker_cpu_pct']} | "
            f"{r['hop_p50_ms']} | {r['hop_p99_ms']} |"
        )
    if args.json:
        print(json.dumps(report))
    return 0
