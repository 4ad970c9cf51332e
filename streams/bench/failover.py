"""``loopwarden bench failover``: how long a group of two workers stops deciding when one goes away.

Two workers share the embedded broker's events topic (8 partitions). After a
fill of ``--runs`` live runs (two calls with their results each) a steady
load of gated calls (every call awaits its verdict, ``--rate`` per second)
runs while worker B is, in turn:

- ``kill``: SIGKILLed; timed until A is ready holding every partition
  (then B is started again on its data dir, untimed, to get back to two);
- ``restart``: SIGTERMed and started again at once on its data dir;
- ``wipe``: SIGKILLed, its data dir removed, started again.

For each: seconds from the signal to ready (the group serving every
partition again), and the verdict latency of the gated calls sent in that
window, apart for the partitions the survivor held before (does the rest of
the fleet pause?) and those that moved. A runner in gate mode waits that
long, or allows the call after its ``check_timeout``; local decisions never
wait for the worker. Repeated per state size and per ``--standbys``
(the worker's ``--standby-replicas``). Numbers, never assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
SCENARIOS = ("kill", "restart", "wipe")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=_ints, default=[2000, 20000], help="live runs before the failover, comma-separated")
    p.add_argument("--standbys", type=_ints, default=[1, 0], help="worker --standby-replicas values, comma-separated")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated: kill, restart, wipe")
    p.add_argument("--rate", type=float, default=100.0, help="steady gated calls per second during the failovers")
    p.add_argument("--partitions", type=int, default=8, help="partitions of the events topic and run table")
    p.add_argument("--session-timeout", type=float, default=10.0, help="the workers' --session-timeout, seconds")
    p.add_argument(
        "--instance-ids", action="store_true", help="static membership: each worker gets a --group-instance-id"
    )
    p.add_argument("--log-dir", type=Path, default=None, help="keep the workers' logs here (default: removed)")
    p.add_argument("--json", action="store_true", help="print the report as JSON only")
    p.add_argument("worker_args", nargs=argparse.REMAINDER, help="extra flags for both workers (after --)")


def fill_events(runs: int) -> Iterator[dict]:
    """``runs`` healthy runs of two distinct calls, each with its result (state for every run, no verdicts)."""
    for r in range(runs):
        run = f"fill-{r}"
        for i in range(2):
            call = {
                "type": "tool_call",
                "agent_id": f"agent-{r % 200}",
                "session_id": f"s-{run}",
                "run_id": run,
                "tool_name": "read",
                "tool_call_id": f"{run}-{i}",
                "params": {"path": f"/f/{r}/{i}"},
            }
            yield call
            yield {**call, "type": "tool_result", "result": {"content": [{"type": "text", "text": f"ok {r} {i}"}]}}


class Load:
    """Gated calls at a steady rate on a thread of its own; the latency of each one's verdict.

    Every call awaits its verdict (``await_decision``), so each gets one; ``points`` holds
    ``(sent at, latency, events partition)`` per verdict received.
    """

    def __init__(self, bootstrap: str, rate: float) -> None:
        self.bootstrap = bootstrap
        self.rate = rate
        self.points: list[tuple[float, float, int]] = []
        self.sent = 0
        self._partition: dict[str, int] = {}  # run id -> events partition
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def start(self) -> Load:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the steady load did not start")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def window(self, start: float, end: float, partitions: set[int]) -> dict[str, Any]:
        """Latency (ms) of the verdicts of calls sent in ``[start, end]`` on ``partitions``."""
        from loopwarden.bench.stats import percentile

        lat = sorted(latency for sent, latency, p in list(self.points) if start <= sent <= end and p in partitions)
        if not lat:
            return {"verdicts": 0}
        return {
            "verdicts": len(lat),
            "p50_ms": round(percentile(lat, 0.5) * 1000, 1),
            "p99_ms": round(percentile(lat, 0.99) * 1000, 1),
            "max_ms": round(lat[-1] * 1000, 1),
        }

    async def _main(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        from loopwarden.devtools.simulate import run_key

        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=1)
        consumer = AIOKafkaConsumer(
            "agent.loop-control",
            bootstrap_servers=self.bootstrap,
            auto_offset_reset="latest",
            enable_auto_commit=False,
            fetch_max_wait_ms=5,
        )
        await producer.start()
        await consumer.start()
        await consumer.getmany(timeout_ms=200)  # positioned at the end before the first call

        async def read() -> None:
            while not self._stop.is_set():
                batch = await consumer.getmany(timeout_ms=50)
                now = time.time()
                for records in batch.values():
                    for r in records:
                        v = json.loads(r.value)
                        ts, run = v.get("event_ts"), v.get("run_id") or ""
                        if ts and run.startswith("steady-") and run in self._partition:
                            self.points.append((ts, now - ts, self._partition[run]))

        def sent(run: str, future: Any) -> None:
            if not future.cancelled() and future.exception() is None:
                self._partition[run] = future.result().partition

        reader = asyncio.create_task(read())
        self._ready.set()
        start = time.monotonic()
        try:
            while not self._stop.is_set():
                due = int((time.monotonic() - start) * self.rate) + 1 - self.sent
                for _ in range(max(0, due)):
                    i = self.sent
                    run = f"steady-{i // 20}"  # a run of 20 distinct calls, then the next
                    event = {
                        "type": "tool_call",
                        "agent_id": f"agent-{(i // 20) % 50}",  # a run's calls share its key
                        "session_id": f"s-{run}",
                        "run_id": run,
                        "tool_name": "read",
                        "tool_call_id": f"{run}-{i}",
                        "params": {"path": f"/steady/{i}"},
                        "await_decision": True,
                        "ts": time.time(),
                    }
                    future = await producer.send(
                        "agent.events", json.dumps(event).encode(), key=run_key(event).encode()
                    )
                    future.add_done_callback(lambda f, run=run: sent(run, f))
                    self.sent += 1
                await asyncio.sleep(0.01)
        finally:
            await reader
            await producer.stop()
            await consumer.stop()


def _wait(predicate: Any, timeout: float, every: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False


def _ready(worker: Any) -> dict | None:
    """The worker's ``/readyz`` body when it is ready, else None."""
    try:
        status, body = worker.get("/readyz", timeout=2.0)
    except OSError:
        return None
    return json.loads(body) if status == 200 else None


def _serving(workers: list[Any], partitions: int) -> bool:
    """Every listed worker ready, and together they hold every events partition once."""
    held: list[int] = []
    for worker in workers:
        status = _ready(worker)
        if status is None or not status["partitions"]:
            return False
        held += status["partitions"]
    return sorted(held) == list(range(partitions))


def one_group(
    runs: int,
    standbys: int,
    scenarios: list[str],
    rate: float,
    partitions: int,
    session_timeout: float,
    instance_ids: bool,
    worker_args: list[str],
    log: Any = print,
    log_dir: Path | None = None,
) -> dict[str, Any]:
    """A fresh broker and two workers: the fill, then each scenario under the steady load."""
    from loopwarden.devtools.broker import EmbeddedBroker
    from loopwarden.devtools.processes import WorkerProcess
    from loopwarden.devtools.simulate import publish

    result: dict[str, Any] = {"runs": runs, "standby_replicas": standbys}
    with tempfile.TemporaryDirectory(prefix="lw-failover-") as tmp, EmbeddedBroker() as broker:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(CONFIG))

        def worker(name: str) -> Any:
            extra = [
                "--partitions",
                str(partitions),
                "--standby-replicas",
                str(standbys),
                "--session-timeout",
                str(session_timeout),
                *(["--group-instance-id", f"bench-{name}"] if instance_ids else []),
                *worker_args,
            ]
            logs = None if log_dir is None else log_dir / f"{runs}-runs-{standbys}-standbys"
            return WorkerProcess(
                broker.url, Path(tmp) / name, config=config, log_level="warning", extra=extra, log_dir=logs
            )

        a, b = worker("a").start(), worker("b").start()
        load: Load | None = None
        try:
            if not _wait(lambda: _serving([a, b], partitions), 120):
                raise RuntimeError(f"the two workers did not share the partitions; logs {a.log_path}, {b.log_path}")
            n = 4 * runs
            t0 = time.monotonic()
            asyncio.run(publish(broker.bootstrap, "agent.events", fill_events(runs), 0, None, count=n, linger_ms=20))
            _wait(
                lambda: (
                    a.metrics().get("loopwarden_events_total", 0) + b.metrics().get("loopwarden_events_total", 0) >= n
                ),
                600,
            )
            result["fill_s"] = round(time.monotonic() - t0, 1)
            log(f"{runs} runs, {standbys} standby: filled in {result['fill_s']} s")
            load = Load(broker.bootstrap, rate).start()
            time.sleep(3.0)
            for name in scenarios:
                result[name] = scenario(name, a, b, load, partitions, log)
                log(f"  {name}: {result[name]}")
            # Each worker's gauge, against the runs alive (the fill's and the steady load's; none expires).
            result["active_runs"] = [w.metrics().get("loopwarden_active_runs") for w in (a, b)]
            result["live_runs"] = runs + (load.sent + 19) // 20
        finally:
            if load is not None:
                load.stop()
            for w in (a, b):
                w.stop()
    return result


def scenario(name: str, a: Any, b: Any, load: Load, partitions: int, log: Any = print) -> dict[str, Any]:
    """One failover of worker B under the load; back to two balanced workers before it returns."""
    before = _ready(a) or {"partitions": []}
    survivor = set(before["partitions"])
    moved = set(range(partitions)) - survivor
    start = time.time()
    t0 = time.monotonic()
    if name == "kill":
        b.kill()
        done = _wait(lambda: _serving([a], partitions), 180)
    elif name == "restart":
        b.stop()
        b.start()
        done = _wait(lambda: _serving([a, b], partitions), 180)
    elif name == "wipe":
        b.kill()
        b.wipe()
        b.start()
        done = _wait(lambda: _serving([a, b], partitions), 180)
    else:
        raise ValueError(f"unknown scenario {name!r}")
    ready_s = time.monotonic() - t0
    end = time.time()
    time.sleep(3.0)  # verdicts of the last calls of the window arrive
    out: dict[str, Any] = {
        "ready_s": round(ready_s, 1) if done else None,
        "survivor_partitions": load.window(start, end, survivor),
        "moved_partitions": load.window(start, end, moved),
    }
    if name == "kill":
        b.start()
    _wait(lambda: _serving([a, b], partitions), 180)  # two balanced workers again before the next one
    time.sleep(3.0)
    return out


def bench_failover(args: argparse.Namespace, log: Any = print) -> dict[str, Any]:
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    extra = [a for a in args.worker_args if a != "--"]
    started = time.monotonic()
    groups = [
        one_group(
            runs,
            standbys,
            scenarios,
            args.rate,
            args.partitions,
            args.session_timeout,
            args.instance_ids,
            extra,
            log,
            args.log_dir,
        )
        for runs in args.runs
        for standbys in args.standbys
    ]
    return {
        "rate": args.rate,
        "partitions": args.partitions,
        "session_timeout_s": args.session_timeout,
        "instance_ids": args.instance_ids,
        "groups": groups,
        "seconds": round(time.monotonic() - started, 1),
    }


def table(report: dict[str, Any]) -> str:
    """The figures as a Markdown table: one row per state size, standbys and scenario."""
    rows = [
        "| runs | standbys | scenario | ready after (s) | survivor p99 / max (ms) | moved p99 / max (ms) |",
        "|---:|---:|---|---:|---:|---:|",
    ]

    def cell(w: dict[str, Any]) -> str:
        return f"{w['p99_ms']:.0f} / {w['max_ms']:.0f}" if w.get("verdicts") else "-"

    for g in report["groups"]:
        for name in SCENARIOS:
            if name in g:
                s = g[name]
                ready = "-" if s["ready_s"] is None else f"{s['ready_s']:.1f}"
                rows.append(
                    f"| {g['runs']:,} | {g['standby_replicas']} | {name} | {ready} | "
                    f"{cell(s['survivor_partitions'])} | {cell(s['moved_partitions'])} |"
                )
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    report = bench_failover(args, log=(lambda *_: None) if args.json else print)
    print(json.dumps(report) if args.json else table(report))
    return 0
