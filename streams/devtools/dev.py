"""``loopwarden dev``: the whole thing on one machine, with a live terminal view.

Starts the embedded Tansu broker, one worker (subprocess, temp data dir,
loop detection enabled), the fleet simulator, and a rich view of verdicts
and rates read from the control topic and the worker's ``/metrics``.
Everything stops after ``--duration`` seconds (or Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEV_CONFIG = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 20}},
    "agents": {"list": [{"id": "agent-0001", "tools": {"loopDetection": {"warningThreshold": 5,
                                                                         "criticalThreshold": 8}}}]},
}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("dev", help="demo: embedded broker + worker + simulated fleet + live view",
                              description="Run everything locally (no Kafka needed) and watch verdicts live.")
    p.add_argument("--duration", type=float, default=60.0, help="seconds to run (0 = until Ctrl-C)")
    p.add_argument("--agents", type=int, default=40)
    p.add_argument("--rate", type=float, default=300.0, help="simulated events per second")
    p.add_argument("--loop-share", type=float, default=0.35)
    p.add_argument("--port", type=int, default=0, help="worker HTTP port (0 = a free one)")
    p.add_argument("--broker", default=None, help="use this Kafka instead of the embedded Tansu")
    p.add_argument("--config", default=None, help="loop-detection config file (default: a demo config)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (worker log, data)")
    p.set_defaults(func=main)


class View:
    """State of the live view; :meth:`render` builds the rich renderable."""

    def __init__(self, duration: float, worker: Any, bootstrap: str) -> None:
        self.duration, self.worker, self.bootstrap = duration, worker, bootstrap
        self.port = worker.port
        self.started = time.monotonic()
        self.recent: collections.deque = collections.deque(maxlen=14)
        self.by_kind: collections.Counter = collections.Counter()
        self.verdicts = 0
        self.metrics: dict[str, float] = {}
        self.rates: dict[str, float] = {}
        self._last: tuple[float, dict[str, float]] | None = None
        self.latencies: collections.deque = collections.deque(maxlen=2000)

    def on_verdict(self, verdict: dict) -> None:
        self.verdicts += 1
        self.by_kind[(verdict["action"], verdict.get("detector") or "-")] += 1
        if verdict.get("event_ts"):
            self.latencies.append(time.time() - verdict["event_ts"])
        if verdict["action"] != "allow":
            self.recent.appendleft(verdict)

    def sample(self) -> None:
        now, m = time.monotonic(), self.worker.metrics()
        if self._last is not None:
            dt = max(now - self._last[0], 1e-6)
            for name in ("loopwarden_events_total", "loopwarden_verdicts_total", "loopwarden_dead_letters_total"):
                self.rates[name] = (m.get(name, 0.0) - self._last[1].get(name, 0.0)) / dt
        self._last = (now, m)
        self.metrics = m

    def render(self, sent: int):
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table

        m, elapsed = self.metrics, time.monotonic() - self.started
        lat = sorted(self.latencies)
        p50 = f"{lat[len(lat) // 2] * 1000:.0f} ms" if lat else "-"
        p99 = f"{lat[int(len(lat) * 0.99)] * 1000:.0f} ms" if lat else "-"
        head = Table.grid(padding=(0, 3))
        head.add_row(
            f"[b]elapsed[/b] {elapsed:5.1f}s" + (f" / {self.duration:.0f}s" if self.duration else ""),
            f"[b]sent[/b] {sent}",
            f"[b]processed[/b] {m.get('loopwarden_events_total', 0):.0f} "
            f"({self.rates.get('loopwarden_events_total', 0):.0f}/s)",
            f"[b]verdicts[/b] {self.verdicts} ({self.rates.get('loopwarden_verdicts_total', 0):.0f}/s)",
        )
        head.add_row(
            f"[b]active runs[/b] {m.get('loopwarden_active_runs', 0):.0f}",
            f"[b]dead letters[/b] {m.get('loopwarden_dead_letters_total', 0):.0f}",
            f"[b]event→verdict[/b] p50 {p50} p99 {p99}",
            f"[b]ready[/b] {'yes' if m.get('loopwarden_ready') else 'no'}  "
            f"[dim]metrics http://127.0.0.1:{self.port}/metrics[/dim]",
        )
        recent = Table(title="latest verdicts (allow not shown)", expand=True)
        for col in ("action", "detector", "level", "count", "tool", "agent", "run"):
            recent.add_column(col)
        colors = {"warn": "yellow", "block": "red", "abort": "bold magenta"}
        for v in self.recent:
            recent.add_row(f"[{colors.get(v['action'], 'white')}]{v['action']}[/]", v.get("detector", ""),
                           v.get("level", ""), str(v.get("count", "")), v.get("tool_name") or "",
                           v.get("agent_id", ""), v.get("run_id") or "")
        kinds = Table(title="verdicts by action and detector")
        kinds.add_column("action")
        kinds.add_column("detector")
        kinds.add_column("n", justify="right")
        for (action, detector), n in sorted(self.by_kind.items()):
            kinds.add_row(action, detector, str(n))
        return Group(Panel(head, title=f"loopwarden dev — broker {self.bootstrap}"), recent, kinds)


async def _watch(bootstrap: str, topic: str, view: View, stop: asyncio.Event) -> None:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="latest",
                                fetch_max_wait_ms=20, enable_auto_commit=False)
    await consumer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=100)
            for records in batch.values():
                for r in records:
                    view.on_verdict(json.loads(r.value))
    finally:
        await consumer.stop()


async def _run(args: argparse.Namespace, bootstrap: str, worker: Any) -> int:
    from rich.console import Console
    from rich.live import Live

    from streams.devtools.simulate import SimStats, endless_fleet, publish

    console = Console()
    with console.status("starting worker (joins the consumer group, creates topics)..."):
        try:
            await asyncio.to_thread(worker.wait_ready, 90.0)
        except RuntimeError as exc:
            console.print(f"[red]{exc}[/red]")
            return 1
    view = View(args.duration, worker, bootstrap)
    stats = SimStats()
    stop = asyncio.Event()
    watcher = asyncio.create_task(_watch(bootstrap, "agent.loop-control", view, stop))
    await asyncio.sleep(0.5)  # let the watcher subscribe before the first verdicts
    events = endless_fleet(args.agents, args.loop_share, seed=int(time.time()) % 10_000, gate_every=5)
    sim = asyncio.create_task(publish(bootstrap, "agent.events", events, args.rate, args.duration or None, stats))
    with Live(view.render(0), console=console, refresh_per_second=4, transient=False) as live:
        while not sim.done():
            await asyncio.sleep(0.5)
            view.sample()
            live.update(view.render(stats.sent))
        await asyncio.sleep(1.0)  # the last verdicts
        view.sample()
        live.update(view.render(stats.sent))
    stop.set()
    await watcher
    sim.result()
    print()  # the live view leaves the cursor at the end of its last line
    print(f"sent {stats.sent} events, {view.verdicts} verdicts; worker processed "
          f"{view.metrics.get('loopwarden_events_total', 0):.0f} events", flush=True)
    return 0


def main(args: argparse.Namespace) -> int:
    from streams.devtools.broker import EmbeddedBroker
    from streams.devtools.processes import WorkerProcess
    from streams.kafka.connection import servers

    tmp = Path(tempfile.mkdtemp(prefix="loopwarden-dev-"))
    broker = None
    worker = None
    try:
        if args.broker:
            url = args.broker
        else:
            broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
            url = broker.url
        bootstrap = ",".join(servers(url))
        config = args.config
        if config is None:
            config = str(tmp / "loop-detection.json")
            Path(config).write_text(json.dumps(DEV_CONFIG, indent=2))
        worker = WorkerProcess(url, tmp / "data", config=config, extra=["--expire-interval", "5"], log_dir=tmp,
                               port=args.port)
        worker.start()
        try:
            code = asyncio.run(_run(args, bootstrap, worker))
        except KeyboardInterrupt:
            code = 130
        if code != 0:
            print(f"worker log: {worker.log_path}", file=sys.stderr)
        return code
    finally:
        if worker is not None:
            worker.stop()
        if broker is not None:
            broker.stop()
        if not args.keep:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
