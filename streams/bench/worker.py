"""``loopwarden bench worker``: one worker on Tansu, against the raw-consume ceiling.

Phases, all on one embedded broker in one run:

1. preload N synthetic fleet events into the events topic;
2. ceiling: a plain aiokafka consumer reads those N messages (no work);
3. throughput: start one worker (subprocess) and time how fast it drains
   the backlog, from its ``loopwarden_events_total`` between 10% and 90%;
4. latency: publish at 50% of that rate (every 5th call gated with
   ``await_decision``, so it always gets a verdict) and measure
   event -> verdict as a runner sees it: verdict arrival minus event ``ts``.

Each latency level gets a fresh broker and worker: Tansu's memory engine
answers more slowly the more records it holds (a plain producer and
consumer at 2,000 msg/s go from 5 to 28 ms p50 in 20 s on 4 partitions),
so a level measured after the backlog would time the broker's history.
Beside each level, the broker floor: the same events at the same rate
through a plain aiokafka relay in its own process (consume, forward the
gated calls to the control topic, no decoding), also on a fresh broker.
That is the least any worker in Python can take for the same two hops.

Numbers depend on the machine: 2 cores are shared by broker, worker and load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BENCH_CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
# The same with the fleet extensions on (``--fleet``): what incidents and cross-run detection cost.
FLEET_BENCH_CONFIG = {
    **BENCH_CONFIG,
    "loopwarden": {"incidents": {"enabled": True, "block": True}, "crossRun": {"enabled": True}},
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=int, default=100_000, help="backlog size for the throughput phase")
    p.add_argument("--latency-seconds", type=float, default=20.0)
    p.add_argument("--latency-rate", type=float, default=None, help="events/s (default: 50%% of measured)")
    p.add_argument("--agents", type=int, default=200)
    p.add_argument("--json", action="store_true", help="print the result as one JSON line too")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="worker config file (repeatable: each is measured in turn, ratios to the first)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="measure the configs N times, interleaved (A B A B ...), and compare their medians",
    )
    p.add_argument(
        "--fleet",
        action="store_true",
        help="measure the default config, then the same with the fleet extensions on, and their ratio",
    )
    p.add_argument(
        "--event-ids",
        action="store_true",
        help="every event carries an event_id, as the runner client's do (default: none, as before)",
    )
    p.add_argument("worker_args", nargs=argparse.REMAINDER, help="extra flags for the worker (after --)")


async def _raw_consume(bootstrap: str, topic: str, n: int) -> float:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=10,
        max_partition_fetch_bytes=4 << 20,
    )
    await consumer.start()
    try:
        got, start = 0, time.perf_counter()
        while got < n:
            batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            got += sum(len(v) for v in batch.values())
        return n / (time.perf_counter() - start)
    finally:
        await consumer.stop()


GATED = b'"await_decision":true'


def relay(bootstrap: str, fetch_wait_ms: int, linger_ms: int, ready: Any) -> None:
    """The broker floor's worker stand-in (run in its own process): forward gated calls as they are."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            "agent.events",
            bootstrap_servers=bootstrap,
            auto_offset_reset="latest",
            enable_auto_commit=False,
            fetch_max_wait_ms=fetch_wait_ms,
        )
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=linger_ms)
        await consumer.start()
        await producer.start()
        await consumer.getmany(timeout_ms=200)  # assigned and positioned before the load starts
        ready.set()
        while True:
            batch = await consumer.getmany(timeout_ms=100)
            for records in batch.values():
                for r in records:
                    if GATED in r.value:
                        await producer.send("agent.loop-control", r.value, key=r.key)

    asyncio.run(main())


def _event_ts(value: bytes) -> float | None:
    """When the event behind a control record was sent: a verdict's ``event_ts``, a relayed event's ``ts``."""
    v = json.loads(value)
    if not (v.get("run_id") or "").startswith("lat-"):
        return None
    return v.get("event_ts") or (v.get("ts") if v.get("type") == "tool_call" else None)


async def _latency(bootstrap: str, rate: float, seconds: float, agents: int, event_ids: bool = False) -> dict:
    from aiokafka import AIOKafkaConsumer

    from loopwarden.devtools.simulate import SimStats, endless_fleet, publish, with_event_ids

    consumer = AIOKafkaConsumer(
        "agent.loop-control",
        bootstrap_servers=bootstrap,
        auto_offset_reset="latest",
        enable_auto_commit=False,
        fetch_max_wait_ms=5,
    )
    await consumer.start()
    points: list[tuple[float, float]] = []  # (sent at, latency)
    stop = asyncio.Event()

    async def read() -> None:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=50)
            now = time.time()
            for records in batch.values():
                for r in records:
                    ts = _event_ts(r.value)
                    if ts:
                        points.append((ts, now - ts))

    # Generated up front: making synthetic payloads costs more CPU than sending them.
    source = endless_fleet(agents, 0.3, seed=99, gate_every=5, prefix="lat-")
    if event_ids:
        source = with_event_ids(source, seed=99)
    events = [next(source) for _ in range(int(rate * seconds) + 1000)]
    reader = asyncio.create_task(read())
    await asyncio.sleep(1.0)
    stats = SimStats()
    await publish(bootstrap, "agent.events", iter(events), rate, seconds, stats, linger_ms=1)
    await asyncio.sleep(2.0)
    stop.set()
    await reader
    await consumer.stop()
    if not points:
        return {"rate": rate, "sent": stats.sent, "verdicts": 0}
    from loopwarden.bench.stats import percentile

    lat = sorted(latency for _, latency in points)

    def pick(q: float) -> float:
        return percentile(lat, q) * 1000

    return {
        "rate": rate,
        "sent": stats.sent,
        "verdicts": len(lat),
        "p50_ms": round(pick(0.5), 1),
        "p90_ms": round(pick(0.9), 1),
        "p99_ms": round(pick(0.99), 1),
        "max_ms": round(lat[-1] * 1000, 1),
        "p99_by_quarter_ms": p99_by_quarter(points),
    }


def p99_by_quarter(points: list[tuple[float, float]]) -> list[float]:
    """p99 (ms) of the latencies of events sent in each quarter of the window, in time order.

    Tansu's memory store costs more per produce and fetch the more record batches it holds,
    so a broker's latency climbs through a level even at a steady rate; a plain relay shows
    the same climb (streams/bench/BENCHMARKS.md)."""
    from loopwarden.bench.stats import percentile

    points = sorted(points)
    first, span = points[0][0], (points[-1][0] - points[0][0]) or 1.0
    quarters: list[list[float]] = [[], [], [], []]
    for sent, latency in points:
        quarters[min(3, int(4 * (sent - first) / span))].append(latency)
    return [round(percentile(sorted(q), 0.99) * 1000, 1) if q else 0.0 for q in quarters]


def measure(
    events: int = 100_000,
    agents: int = 200,
    latency_seconds: float = 20.0,
    latency_rates: tuple[float | str, ...] = ("0.5",),
    extra: list[str] | tuple[str, ...] = (),
    on_worker_start: Any = None,
    config: dict | None = None,
    event_ids: bool = False,
) -> dict:
    """Raw consume and backlog drain on one broker, then event->verdict at each rate, each on a fresh one.

    A rate is events/s, or a string fraction (``"0.25"``) of the measured drain rate.
    ``on_worker_start(pid)`` is called once the draining worker process runs (e.g. to attach a profiler).
    ``config``: the worker's config document (default :data:`BENCH_CONFIG`).
    ``event_ids``: every event sent (backlog and latency load) carries an id, as the runner client's do.
    """
    import shutil

    from loopwarden.devtools.simulate import endless_fleet, publish, with_event_ids

    tmp = Path(tempfile.mkdtemp(prefix="loopwarden-bench-"))
    (tmp / "config.json").write_text(json.dumps(BENCH_CONFIG if config is None else config))
    result: dict = {"events": events, "event_ids": event_ids}
    try:
        with _fresh_broker(tmp / "drain", extra) as broker:
            bootstrap = broker.bootstrap
            t0 = time.perf_counter()
            backlog = endless_fleet(agents, 0.3, seed=5)
            asyncio.run(
                publish(
                    bootstrap,
                    "agent.events",
                    with_event_ids(backlog) if event_ids else backlog,
                    0,
                    None,
                    count=events,
                    linger_ms=20,
                )
            )
            result["preload_per_s"] = round(events / (time.perf_counter() - t0))
            result["raw_consume_per_s"] = round(asyncio.run(_raw_consume(bootstrap, "agent.events", events)))
            with _worker(broker, tmp / "drain", extra, on_worker_start, ready=False) as worker:
                throughput, cpu_per_event = _drain_rate(worker, events)
        result["worker_events_per_s"] = round(throughput)
        # CPU time is less disturbed than wall time by other load on a shared machine.
        result["worker_cpu_us_per_event"] = round(cpu_per_event * 1e6, 2)
        result["ratio_to_raw"] = round(throughput / result["raw_consume_per_s"], 4)
        result["latency"] = []
        for i, spec in enumerate(latency_rates):
            rate = round(float(spec) * throughput) if isinstance(spec, str) else float(spec)
            floor = latency_floor(tmp / f"floor-{i}", rate, latency_seconds, agents, extra, event_ids)
            with _fresh_broker(tmp / f"level-{i}", extra) as broker, _worker(broker, tmp / f"level-{i}", extra):
                lat = asyncio.run(_latency(broker.bootstrap, rate, latency_seconds, agents, event_ids))
            lat["of_drain"] = round(rate / throughput, 3)
            lat["floor"] = floor
            result["latency"].append(lat)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


@contextlib.contextmanager
def _fresh_broker(tmp: Path, extra: list[str] | tuple[str, ...]) -> Iterator[Any]:
    """An embedded broker with the worker's topics (partitions as the worker's flags say)."""
    from loopwarden.devtools.broker import EmbeddedBroker
    from loopwarden.kafka.admin import ensure_topics
    from loopwarden.worker.settings import settings_from_flags

    tmp.mkdir(parents=True, exist_ok=True)
    with EmbeddedBroker(log_path=tmp / "tansu.log") as broker:
        asyncio.run(ensure_topics(settings_from_flags(broker.url, extra)))
        yield broker


@contextlib.contextmanager
def _worker(
    broker: Any, tmp: Path, extra: list[str] | tuple[str, ...], on_start: Any = None, ready: bool = True
) -> Iterator[Any]:
    """A worker process on ``broker``; ``ready``: wait until it serves (not while it drains a backlog)."""
    from loopwarden.devtools.processes import WorkerProcess

    worker = WorkerProcess(
        broker.url, tmp / "data", config=tmp.parent / "config.json", extra=list(extra), log_level="warning"
    )
    worker.start()
    if on_start is not None:
        on_start(worker.pid)
    try:
        if ready:
            worker.wait_ready()
        yield worker
    finally:
        worker.stop()


def latency_floor(
    tmp: Path, rate: float, seconds: float, agents: int, extra: list[str] | tuple[str, ...], event_ids: bool = False
) -> dict:
    """The same latency level with the plain relay (:func:`relay`) in the worker's place."""
    import multiprocessing

    from loopwarden.worker.settings import settings_from_flags

    with _fresh_broker(tmp, extra) as broker:
        s = settings_from_flags(broker.url, extra)
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        proc = ctx.Process(target=relay, args=(broker.bootstrap, s.fetch_wait_ms, s.linger_ms, ready), daemon=True)
        proc.start()
        try:
            if not ready.wait(60):
                raise SystemExit("the latency floor's relay did not start")
            return asyncio.run(_latency(broker.bootstrap, rate, seconds, agents, event_ids))
        finally:
            proc.kill()
            proc.join()


def _drain_rate(worker: Any, events: int) -> tuple[float, float]:
    """Events/s of the worker between 10% and 90% of the backlog (by its own counter), and its
    CPU seconds per event over the same span; waits for 100%."""
    from loopwarden.bench.stats import CpuMeter

    cpu = CpuMeter({"worker": worker.pid})

    def processed() -> float:
        return worker.metrics().get("loopwarden_events_total", 0.0)

    lo, hi = 0.1 * events, 0.9 * events
    t_lo = t_hi = None
    n_lo = n_hi = 0.0
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if not worker.alive():
            raise SystemExit(f"worker exited; log {worker.log_path}")
        n = processed()
        now = time.perf_counter()
        if t_lo is None and n >= lo:
            t_lo, n_lo, c_lo = now, n, cpu.seconds()["worker"]
        if n >= hi:
            t_hi, n_hi, c_hi = now, n, cpu.seconds()["worker"]
            break
        time.sleep(0.1)  # each scrape costs the worker a /metrics render
    if t_lo is None or t_hi is None or t_hi <= t_lo:
        raise SystemExit("worker did not drain the backlog")
    while processed() < events:
        time.sleep(0.1)
    return (n_hi - n_lo) / (t_hi - t_lo), (c_hi - c_lo) / (n_hi - n_lo)


def versus(base: dict, other: dict) -> dict:
    """Throughput and CPU per event of ``other`` as multiples of ``base``'s (both from this run)."""
    return {
        "events_per_s": round(other["worker_events_per_s"] / base["worker_events_per_s"], 3),
        "cpu_us_per_event": round(other["worker_cpu_us_per_event"] / base["worker_cpu_us_per_event"], 3),
    }


def configs(args: argparse.Namespace) -> list[tuple[str, dict | None]]:
    """(label, document) of each config to measure; one ``None`` (the default) without options."""
    from loopwarden.schemas.config import read_config_document

    out: list[tuple[str, dict | None]] = []
    if args.fleet:
        out += [("default", BENCH_CONFIG), ("fleet extensions", FLEET_BENCH_CONFIG)]
    out += [(path, read_config_document(path)) for path in args.config]
    return out or [("default", None)]


def _print(result: dict, seconds: float) -> None:
    print(f"raw aiokafka consume (ceiling): {result['raw_consume_per_s']:>8} msg/s")
    print(
        f"worker, backlog drain:          {result['worker_events_per_s']:>8} events/s "
        f"(ratio {result['ratio_to_raw']:.3f} of raw), {result['worker_cpu_us_per_event']} us CPU/event"
    )
    for lat in result["latency"]:
        print(
            f"latency at {lat.get('rate')} events/s for {seconds:.0f}s: "
            f"p50 {lat.get('p50_ms')} ms, p90 {lat.get('p90_ms')} ms, p99 {lat.get('p99_ms')} ms "
            f"({lat.get('verdicts')} verdicts); broker floor p50 {lat['floor'].get('p50_ms')} ms, "
            f"p99 {lat['floor'].get('p99_ms')} ms"
        )


def medians(runs: list[dict]) -> dict:
    """The median drain rate and CPU per event of repeated runs of one config."""
    import statistics

    return {
        "worker_events_per_s": statistics.median(r["worker_events_per_s"] for r in runs),
        "worker_cpu_us_per_event": statistics.median(r["worker_cpu_us_per_event"] for r in runs),
    }


def run(args: argparse.Namespace) -> int:
    extra = [a for a in args.worker_args if a != "--"]
    rates = (args.latency_rate,) if args.latency_rate else ("0.5",)
    todo = configs(args)
    labelled = len(todo) > 1 or args.fleet or args.config
    runs: dict[str, list[dict]] = {label: [] for label, _ in todo}
    # Interleaved, so that load from elsewhere on the machine falls on every config alike.
    for round_ in range(max(1, args.repeat)):
        for label, config in todo:
            result = measure(
                args.events, args.agents, args.latency_seconds, rates, extra, config=config, event_ids=args.event_ids
            )
            result["config"] = label
            runs[label].append(result)
            if labelled:
                print(f"config: {label}" + (f" (run {round_ + 1} of {args.repeat})" if args.repeat > 1 else ""))
            _print(result, args.latency_seconds)
    summary = {label: medians(rs) for label, rs in runs.items()}
    base_label = todo[0][0]
    for label, _ in todo[1:]:
        summary[label]["vs_first"] = versus(summary[base_label], summary[label])
        what = "medians of " if args.repeat > 1 else ""
        print(
            f"{label} vs {base_label} ({what}{args.repeat} run{'s' if args.repeat > 1 else ''}): "
            f"throughput x{summary[label]['vs_first']['events_per_s']}, "
            f"CPU per event x{summary[label]['vs_first']['cpu_us_per_event']}"
        )
    if args.json:
        if len(todo) == 1 and args.repeat == 1:
            print(json.dumps(runs[base_label][0]))
        else:
            print(json.dumps({"runs": [r for rs in runs.values() for r in rs], "summary": summary}))
    return 0
