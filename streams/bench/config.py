"""``loopwarden bench config``: per-agent config records applied per second at fleet scale; the longest loop stall.

``--records`` per-agent records (default 100k, one agent each) go through the
config feed's own path (parse, warnings, :meth:`FleetConfig.set_override`) on
a fresh feed. ``first_us``/``last_us`` are the µs per record of the first and
the last tenth: equal when a record costs the same whatever the number of
agents already configured. ``copying`` applies ``--copying-records`` records
with the copying form (:meth:`FleetConfig.with_override`, the old per-record
rebuild) for contrast. ``--broker`` also loads the records from a topic of the
embedded Tansu broker as a fresh worker does (:meth:`ConfigFeed.run` until
``loaded``), with a ticker measuring the longest stall of the event loop.
"""

from __future__ import annotations

import asyncio
import time

import msgspec

from loopwarden.kafka.configfeed import ConfigFeed
from loopwarden.schemas.config import FleetConfig


def records(n: int) -> list[tuple[bytes, bytes]]:
    return [
        (f"agent-{i:06d}".encode(), msgspec.json.encode({"enabled": True, "historySize": 10 + i % 50}))
        for i in range(n)
    ]


def apply_all(items: list[tuple[bytes, bytes]]) -> dict:
    feed = ConfigFeed(FleetConfig(), "127.0.0.1:1", "bench")
    tenth = max(1, len(items) // 10)
    marks = []
    start = time.perf_counter()
    for i, (key, value) in enumerate(items):
        if i % tenth == 0:
            marks.append(time.perf_counter())
        feed.apply(key, value)
    total = time.perf_counter() - start
    marks.append(time.perf_counter())
    return {
        "records": len(items),
        "seconds": round(total, 3),
        "records_per_second": round(len(items) / total),
        "first_us": round((marks[1] - marks[0]) / tenth * 1e6, 2),
        "last_us": round((marks[-1] - marks[-2]) / max(1, len(items) - tenth * (len(marks) - 2)) * 1e6, 2),
        "applied": feed.applied,
    }


def apply_copying(items: list[tuple[bytes, bytes]]) -> dict:
    from loopwarden.kafka.configfeed import block_of

    fleet = FleetConfig()
    start = time.perf_counter()
    for key, value in items:
        block, ext = block_of(value)
        fleet = fleet.with_override(key.decode(), block, ext)
    total = time.perf_counter() - start
    return {"records": len(items), "seconds": round(total, 3), "records_per_second": round(len(items) / total)}


async def _load_from_broker(bootstrap: str, items: list[tuple[bytes, bytes]]) -> dict:
    from aiokafka import AIOKafkaProducer

    topic = f"bench-config-{int(time.time())}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in items]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    feed = ConfigFeed(FleetConfig(), bootstrap, topic)
    longest = 0.0

    async def ticker() -> None:
        nonlocal longest
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.005)
            longest = max(longest, time.perf_counter() - t - 0.005)

    tick = asyncio.ensure_future(ticker())
    start = time.perf_counter()
    task = asyncio.ensure_future(feed.run())
    await feed.loaded.wait()
    seconds = time.perf_counter() - start
    task.cancel()
    tick.cancel()
    await asyncio.gather(task, tick, return_exceptions=True)
    return {
        "records": len(items),
        "applied": feed.applied,
        "seconds_to_loaded": round(seconds, 2),
        "longest_loop_stall_ms": round(longest * 1000, 1),
    }


def bench_config(n: int, copying: int, broker: bool) -> dict:
    items = records(n)
    report = {"feed": apply_all(items)}
    if copying:
        report["copying"] = apply_copying(items[:copying])
        report["copying_vs_feed_per_record"] = round(
            (report["copying"]["seconds"] / copying) / (report["feed"]["seconds"] / n), 1
        )
    if broker:
        from loopwarden.devtools.broker import EmbeddedBroker

        with EmbeddedBroker() as b:
            report["broker"] = asyncio.run(_load_from_broker(b.bootstrap, items))
    return report


def add_arguments(p) -> None:
    p.add_argument("--records", type=int, default=100_000, help="per-agent records, one agent each")
    p.add_argument(
        "--copying-records", type=int, default=4000, help="records for the copying contrast (0: skip; it is O(n^2))"
    )
    p.add_argument("--broker", action="store_true", help="also load them from a topic of the embedded Tansu broker")


def run(args) -> int:
    report = bench_config(args.records, args.copying_records, args.broker)
    print(msgspec.json.format(msgspec.json.encode(report)).decode())
    return 0
