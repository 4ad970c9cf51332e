"""``loopwarden bench latency``: gate-mode decision round trip on the embedded broker.

Starts Tansu and one ``loopwarden worker`` subprocess, then K simulated
runners (one :class:`~loopwarden.runner.LoopClient` each, in this process) make
gated tool calls (``check`` then ``tool_result``, healthy runs of 40 calls
with distinct params, so every decision is ``allow``). First an open-loop
ramp finds the sustained decision rate (unless given), then each load level
runs open-loop at that fraction of it: calls are started on a fixed
schedule whatever the latency, so queueing shows in the tail.

Every measurement (the ramp, each level) gets a fresh broker and worker:
Tansu's memory engine slows down as its logs grow. Reported per level:
achieved decisions/s, round-trip p50/p95/p99/max, fail opens, CPU of the
worker, broker and runners, and the two hops split by the verdict's ``ts``
(stamped by the worker when it builds the verdict): runner -> worker
(produce, broker, worker fetch, batching, step) and worker -> runner
(verdict produce, broker, listener fetch). One machine, one clock.

Knobs (environment; the CLI keeps ``bench``'s own flags):
``LOOPWARDEN_BENCH_RUNNERS`` (K, default 4), ``LOOPWARDEN_BENCH_RATE``
(sustained decisions/s; measured when unset), ``LOOPWARDEN_BENCH_SECONDS``
(per level, default 10), ``LOOPWARDEN_BENCH_LOADS`` (default
``0.1,0.5,0.9``), ``LOOPWARDEN_BENCH_RAMP_START`` (first ramp rate, default
20/s), ``LOOPWARDEN_BENCH_P95_LIMIT_MS`` (ramp "keeps up" bound, default
200). Client settings come from ``LOOPWARDEN_RUNNER_*``; the worker inherits ``LOOPWARDEN_*`` (e.g.
``LOOPWARDEN_FETCH_WAIT_MS``, ``LOOPWARDEN_BATCH_WITHIN``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec

from loopwarden.bench.stats import CpuMeter, percentile

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
RUN_LENGTH = 40
RUNS_PER_RUNNER = 16
IDLE_SECONDS = 3.0  # before each level: the stack's CPU with no calls (Level.idle_cpu)


class Level(msgspec.Struct, kw_only=True):
    """One measured load level."""

    load: float | None
    target_per_s: float | None
    decisions_per_s: float
    decisions: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    to_worker_p50_ms: float
    to_runner_p50_ms: float
    to_worker_p99_ms: float
    to_runner_p99_ms: float
    fail_open: int
    cpu: dict[str, float] = {}  # % of one core over the level: worker, broker, runners (this process)
    # The same over IDLE_SECONDS before the level, the stack up and no calls: what the consumers'
    # fetch polling alone costs (Tansu scans the fetched partitions several times per fetch wait).
    idle_cpu: dict[str, float] = {}


def _env(name: str, default: Any, kind: type = float) -> Any:
    value = os.environ.get(f"LOOPWARDEN_BENCH_{name}")
    return default if value in (None, "") else kind(value)


class _Runner:
    """One simulated runner: a client and a rotating set of healthy runs."""

    def __init__(self, client: Any, index: int) -> None:
        self.client = client
        self.index = index
        self.calls = itertools.count()
        self.runs = [self._new_run() for _ in range(RUNS_PER_RUNNER)]
        self.used = [0] * RUNS_PER_RUNNER
        self.samples: list[tuple[float, float, float]] = []  # (round trip, to worker, to runner)
        self.fail_open = 0

    def _new_run(self) -> Any:
        return self.client.run(f"bench-agent-{self.index}", run_id=f"bench-{uuid.uuid4().hex[:12]}")

    async def one_call(self, record: bool) -> None:
        n = next(self.calls)
        slot = n % RUNS_PER_RUNNER
        run = self.runs[slot]
        self.used[slot] += 1
        if self.used[slot] >= RUN_LENGTH:
            self.runs[slot], self.used[slot] = self._new_run(), 0
            asyncio.ensure_future(run.end())
        decision = await run.check("read", {"path": f"src/file_{n}.py", "offset": n % 7})
        received = time.time()
        await run.tool_result(decision, result={"content": [{"type": "text", "text": f"body {n}"}]})
        if not record:
            return
        if decision.failed_open or decision.verdict is None:
            self.fail_open += 1
            return
        v = decision.verdict
        to_worker = (v.ts - decision.call.ts) if v.ts and decision.call.ts else float("nan")
        to_runner = (received - v.ts) if v.ts else float("nan")
        self.samples.append((decision.seconds, to_worker, to_runner))


def _level(
    runners: list[_Runner],
    load: float | None,
    target: float | None,
    elapsed: float,
    cpu: dict[str, float] | None = None,
    idle_cpu: dict[str, float] | None = None,
) -> Level:
    samples = [s for r in runners for s in r.samples]
    ms = lambda xs: sorted(x * 1000 for x in xs if x == x)  # noqa: E731 (drops NaN)
    rt, tw, tr = ms(s[0] for s in samples), ms(s[1] for s in samples), ms(s[2] for s in samples)
    r2 = lambda x: round(x, 2)  # noqa: E731
    return Level(
        load=load,
        target_per_s=None if target is None else round(target, 1),
        decisions_per_s=round(len(samples) / elapsed, 1),
        decisions=len(samples),
        p50_ms=r2(percentile(rt, 0.5)),
        p95_ms=r2(percentile(rt, 0.95)),
        p99_ms=r2(percentile(rt, 0.99)),
        max_ms=r2(rt[-1] if rt else float("nan")),
        to_worker_p50_ms=r2(percentile(tw, 0.5)),
        to_runner_p50_ms=r2(percentile(tr, 0.5)),
        to_worker_p99_ms=r2(percentile(tw, 0.99)),
        to_runner_p99_ms=r2(percentile(tr, 0.99)),
        fail_open=sum(r.fail_open for r in runners),
        cpu=cpu or {},
        idle_cpu=idle_cpu or {},
    )


def _reset(runners: list[_Runner]) -> None:
    for r in runners:
        r.samples.clear()
        r.fail_open = 0


async def _ramp(
    runners: list[_Runner], start: float, step_seconds: float, p95_limit_ms: float, max_rate: float, meter: CpuMeter
) -> tuple[float, list[dict]]:
    """Open-loop steps of x1.4 from ``start``: the last rate that keeps up is the sustained rate.

    "Keeps up": at least 95% of the target rate achieved, no fail-open, and
    p95 under ``p95_limit_ms`` (a queue that grows during a step shows there
    first). A closed loop with many calls in flight would overstate it: its
    big batches amortise per-request costs that a steady trickle pays.
    """
    sustained, steps, rate = 0.0, [], start
    while rate <= max_rate:
        _reset(runners)
        meter.mark()
        elapsed = await _open_loop(runners, rate, step_seconds)
        level = _level(runners, None, rate, elapsed, meter.percent())
        steps.append(msgspec.structs.asdict(level))
        print(f"ramp {rate:.1f}/s: {level.decisions_per_s}/s p95 {level.p95_ms} ms", file=sys.stderr, flush=True)
        if level.decisions_per_s < 0.95 * rate or level.fail_open or not level.p95_ms < p95_limit_ms:
            break
        sustained = rate
        rate *= 1.4
        await asyncio.sleep(0.5)
    return sustained, steps


async def _open_loop(runners: list[_Runner], rate: float, seconds: float) -> float:
    """Start calls on a fixed schedule (rate/K per runner) regardless of latency; returns elapsed."""
    per_runner = rate / len(runners)
    tasks: list[asyncio.Task] = []

    async def schedule(r: _Runner, phase: float) -> None:
        interval = 1.0 / per_runner
        t0 = time.monotonic() + phase * interval
        for i in range(int(seconds * per_runner)):
            delay = t0 + i * interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(r.one_call(True)))

    start = time.monotonic()
    await asyncio.gather(*(schedule(r, i / len(runners)) for i, r in enumerate(runners)))
    await asyncio.gather(*tasks)
    return time.monotonic() - start


@contextlib.asynccontextmanager
async def _stack_parts(extra: list[str] | tuple[str, ...] = ()) -> AsyncIterator[tuple[Any, CpuMeter]]:
    """A fresh broker and worker; yields (``await clients(client_id)`` -> a started LoopClient, CPU meter).

    Fresh per measurement: Tansu's memory engine gets slower as its logs grow
    (broker CPU at a fixed 80 produce/s: 16% on an empty log, 28% after 150 k
    records), so a level measured after a ramp would pay for the ramp's data.
    The clients are closed and the worker stopped on exit. ``extra``: the worker's flags
    (its topics get the partitions they ask for).
    """
    from loopwarden.devtools.broker import EmbeddedBroker
    from loopwarden.devtools.processes import TopicNames, WorkerProcess
    from loopwarden.kafka.admin import ensure_topics
    from loopwarden.runner import ClientSettings, LoopClient
    from loopwarden.worker.settings import settings_from_flags

    names = TopicNames(f"bench-{uuid.uuid4().hex[:6]}")
    with tempfile.TemporaryDirectory(prefix="lw-bench-") as tmp, EmbeddedBroker() as broker:
        await ensure_topics(
            msgspec.structs.replace(
                settings_from_flags(broker.url, extra),
                events_topic=names.events,
                control_topic=names.control,
                config_topic=names.config,
                dead_letter_topic=names.dead_letter,
            )
        )
        config = Path(tmp) / "loop.json"
        config.write_text(json.dumps(CONFIG))
        worker = WorkerProcess(
            broker.url, Path(tmp) / "data", names=names, config=config, extra=list(extra), log_level="warning"
        ).start()
        started: list[Any] = []
        settings = ClientSettings.from_env(
            bootstrap=broker.bootstrap,
            events_topic=names.events,
            control_topic=names.control,
            config_topic=names.config,
        )

        async def clients(client_id: str, **options: Any) -> Any:
            """A started client; ``options``: LoopClient keywords (``config=``, ``decisions=``)."""
            client = await LoopClient(settings, client_id=client_id, **options).start()
            started.append(client)
            return client

        clients.settings = settings  # type: ignore[attr-defined]
        try:
            await asyncio.to_thread(worker.wait_ready)
            yield clients, CpuMeter({"worker": worker.pid, "broker": broker.process.pid})
        finally:
            for c in started:
                await c.close()
            await asyncio.to_thread(worker.stop)


@contextlib.asynccontextmanager
async def _stack(
    k: int, extra: list[str] | tuple[str, ...] = ()
) -> AsyncIterator[tuple[list[_Runner], CpuMeter, dict]]:
    """A fresh broker, worker (:func:`_stack_parts`) and K warmed-up runners."""
    async with _stack_parts(extra) as (clients, meter):
        started = [await clients(f"bench-runner-{i}") for i in range(k)]
        runners = [_Runner(c, i) for i, c in enumerate(started)]
        for _ in range(20):  # warm-up: connections, metadata, worker batches
            await asyncio.gather(*(r.one_call(False) for r in runners))
        info = {"client": msgspec.structs.asdict(clients.settings), "client_stats": [c.stats for c in started]}
        yield runners, meter, info


async def bench(
    k: int,
    rate: float | None,
    seconds: float,
    loads: list[float],
    ramp_start: float,
    p95_limit_ms: float,
    extra: list[str] | tuple[str, ...] = (),
) -> dict:
    """``extra``: flags for the worker (e.g. ``--partitions 1``)."""
    report: dict[str, Any] = {
        "runners": k,
        "worker_env": {
            n: v
            for n, v in os.environ.items()
            if n.startswith("LOOPWARDEN_") and not n.startswith(("LOOPWARDEN_RUNNER_", "LOOPWARDEN_BENCH_"))
        },
    }
    stats: list[Any] = []
    if rate is None:
        async with _stack(k, extra) as (runners, meter, info):
            rate, steps = await _ramp(runners, ramp_start, 3.0, p95_limit_ms, 20_000, meter)
            report["ramp"] = steps
            stats += info["client_stats"]
        if not rate:
            raise RuntimeError(f"could not sustain even {ramp_start}/s; see the ramp steps")
    report["sustained_per_s"] = round(rate, 1)
    levels = []
    for load in loads:
        async with _stack(k, extra) as (runners, meter, info):
            report["client"] = info["client"]
            _reset(runners)
            meter.mark()
            await asyncio.sleep(IDLE_SECONDS)
            idle = meter.percent()
            meter.mark()
            elapsed = await _open_loop(runners, rate * load, seconds)
            levels.append(msgspec.structs.asdict(_level(runners, load, rate * load, elapsed, meter.percent(), idle)))
            stats += info["client_stats"]
    report["levels"] = levels
    totals: dict[str, int] = {}
    for st in stats:
        for name, value in msgspec.structs.asdict(st).items():
            totals[name] = totals.get(name, 0) + value
    report["client_stats_total"] = totals
    return report


def table(report: dict) -> str:
    rows = [
        "| load | target/s | decisions/s | p50 ms | p95 ms | p99 ms | max ms | runner->worker p50/p99 | "
        "worker->runner p50/p99 | fail-open | CPU% worker/broker/runners (idle before) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lv in [{**st, "load": "ramp"} for st in report.get("ramp", [])] + report["levels"]:
        cpu, idle = lv.get("cpu") or {}, lv.get("idle_cpu") or {}
        rows.append(
            f"| {lv['load']} | {lv['target_per_s'] or '-'} | {lv['decisions_per_s']} | {lv['p50_ms']} | "
            f"{lv['p95_ms']} | {lv['p99_ms']} | {lv['max_ms']} | {lv['to_worker_p50_ms']}/"
            f"{lv['to_worker_p99_ms']} | {lv['to_runner_p50_ms']}/{lv['to_runner_p99_ms']} | "
            f"{lv['fail_open']} | {cpu.get('worker')}/{cpu.get('broker')}/{cpu.get('runners')}"
            + (f" ({idle.get('worker')}/{idle.get('broker')}/{idle.get('runners')})" if idle else "")
            + " |"
        )
    return "\n".join(rows)


def add_arguments(p: Any) -> None:
    p.add_argument("--runners", type=int, default=_env("RUNNERS", 4, int), help="K runner clients")
    p.add_argument(
        "--rate", type=float, default=_env("RATE", None, float), help="sustained decisions/s (default: found by a ramp)"
    )
    p.add_argument("--seconds", type=float, default=_env("SECONDS", 10.0, float), help="seconds per level")
    p.add_argument("--loads", default=_env("LOADS", "0.1,0.5,0.9", str), help="load levels, fractions of the rate")
    p.add_argument("--ramp-start", type=float, default=_env("RAMP_START", 20.0, float))
    p.add_argument("--p95-limit-ms", type=float, default=_env("P95_LIMIT_MS", 200.0, float))


def run(args: Any) -> int:
    loads = [float(x) for x in str(args.loads).split(",") if x.strip()]
    report = asyncio.run(bench(args.runners, args.rate, args.seconds, loads, args.ramp_start, args.p95_limit_ms))
    print(json.dumps(report, indent=2))
    print(table(report))
    return 0
