"""``loopwarden tune``: what a config would do to recorded runs, and how that moves with a knob.

For every setting (the config as given, or each point of a ``--sweep`` grid)
each recorded event is decided by :func:`loopwarden.detection.decision.decide_event`,
the decision the worker and ``replay`` make (extensions included: escalation
aborts, the fleet response), and the outcome is counted per detector and per
agent: runs warned (a warning the runner would be shown), blocked, aborted,
the call of the run where that first happened, the calls a block refuses and
the tokens spent producing them, and the tokens charged to loops. Events are
decoded once and the payload hashes are cached, so each further setting costs
only the rules. ``loopwarden.shadow`` is ignored: the question is what
enforcing would do.
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import msgspec
from msgspec import UNSET

from loopwarden import UsageError, extra_hint
from loopwarden.detection.decision import EventDecision, decide_event
from loopwarden.detection.payloads import HASHER
from loopwarden.detection.tools import normalize_tool_name
from loopwarden.schemas.config import ConfigError, FleetConfig
from loopwarden.schemas.config_check import load_checked
from loopwarden.schemas.events import EventDecodeError, RunEnd, ToolCall, ToolResult, decode_event, state_key
from loopwarden.schemas.jsvalues import is_blank

# Numeric tools.loopDetection knobs a sweep may vary (nested ones with a dot).
KNOBS = (
    "historySize",
    "warningThreshold",
    "criticalThreshold",
    "unknownToolThreshold",
    "globalCircuitBreakerThreshold",
    "postCompactionGuard.windowSize",
)


class Prepared(NamedTuple):
    """A trace decoded once: per event its run number, call number in the run and call usage."""

    events: list  # Event
    keys: list[tuple[str, str]]  # state key per event
    runs: list[int]  # run number per event (a run ends at run_end; its key may start a new one)
    calls: list[int]  # tool_calls of the run so far, this one included (1-based call number)
    tokens: list[int]  # usage tokens of a tool_call (0 without)
    costs: list[float]
    run_agents: list[str]  # agent id per run number
    active: list[int]  # indices of the events of runs that any setting could detect something in
    bad_lines: int
    has_usage: bool
    has_cost: bool
    lines: list[int]  # per event, its index among the non-blank lines (replay's event_index)


class Counts(msgspec.Struct, kw_only=True):
    """What one setting does, for one detector, one agent or the whole fleet."""

    runs: int = 0  # runs seen (for the fleet and per agent; per detector: runs it fired on)
    warned: int = 0  # runs shown at least one warning (the bucket rule lets it out)
    blocked: int = 0  # runs with at least one call blocked
    aborted: int = 0  # runs aborted by the post-compaction guard
    first_warn_call: float | None = None  # median call number of a run's first warning
    first_block_call: float | None = None  # median call number of a run's first block or abort
    cut_calls: int = 0  # calls refused by blocks
    cut_tokens: int = 0  # usage tokens of the refused calls
    loop_tokens: int = 0  # tokens charged to loops
    loop_cost: float = 0.0


class Setting(msgspec.Struct, kw_only=True):
    knobs: dict[str, int]
    fleet: Counts
    by_detector: dict[str, Counts]
    by_agent: dict[str, Counts]


class Report(msgspec.Struct, kw_only=True):
    events: int
    runs: int
    bad_lines: int
    has_usage: bool
    settings: list[Setting]
    seconds: float


# ------------------------------------------------------------------ input


def trace_files(paths: Iterable[str]) -> list[Path]:
    """Files as given; a directory gives its ``*.jsonl`` files (recursively, sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]
    return out


def _lines(files: list[Path]) -> Iterator[bytes]:
    for path in files:
        with open(path, "rb") as fh:
            yield from fh


def prepare(lines: Iterable[bytes | str], profile: bool = False) -> Prepared:
    """Decode once; mark the runs no setting can detect anything in, so a sweep skips them.

    Every rule needs a call whose signature the run has seen before (the
    repeat, poll, breaker and ping-pong streaks), a tool error (unknown tool)
    or a compaction retry (the guard); a run with none of them is the same
    under every setting. With ``profile`` (some agent under the openclaw-latest
    profile) an ``exec`` or ``write`` call is enough too: failing commands and
    rewrites of one file count without repeating a signature.
    """
    events, keys, runs, calls, tokens, costs, run_agents, indices = [], [], [], [], [], [], [], []
    seen_sigs: list[set[str]] = []
    live: list[bool] = []
    current: dict[tuple[str, str], list[int]] = {}  # state key -> [run number, calls so far]
    bad = 0
    has_usage = has_cost = False
    index = -1
    for line in lines:
        if is_blank(line):
            continue
        index += 1
        try:
            event = decode_event(line)
        except EventDecodeError:
            bad += 1
            continue
        key = state_key(event)
        run = current.get(key)
        if run is None:
            run = current[key] = [len(run_agents), 0]
            run_agents.append(event.agent_id)
            seen_sigs.append(set())
            live.append(False)
        t = 0
        c = 0.0
        number = run[0]
        if not live[number] and not isinstance(event, RunEnd):
            if isinstance(event, (ToolCall, ToolResult)):
                sig = HASHER.call_info(
                    normalize_tool_name(event.tool_name), b"{}" if event.params is UNSET else bytes(event.params)
                ).sig
                sigs = seen_sigs[number]
                if isinstance(event, ToolCall):
                    live[number] = sig in sigs or (profile and (sig[:5] == "exec:" or sig[:6] == "write:"))
                else:
                    live[number] = event.error is not UNSET and bytes(event.error) != b"null"
                sigs.add(sig)
            else:  # compaction_retry
                live[number] = True
            if live[number]:
                seen_sigs[number] = set()
        if isinstance(event, ToolCall):
            run[1] += 1
            usage = event.usage
            if usage is not None:
                has_usage = True
                t = usage.input_tokens + usage.output_tokens
                if usage.cost is not None:
                    has_cost = True
                    c = usage.cost
        elif isinstance(event, RunEnd):
            del current[key]
        events.append(event)
        indices.append(index)
        keys.append(key)
        runs.append(run[0])
        calls.append(run[1])
        tokens.append(t)
        costs.append(c)
    active = [i for i, run in enumerate(runs) if live[run]]
    return Prepared(events, keys, runs, calls, tokens, costs, run_agents, active, bad, has_usage, has_cost, indices)


# ------------------------------------------------------------------ settings


def parse_sweep(spec: str) -> tuple[str, list[int]]:
    """``knob=LO:HI[:STEP]`` (inclusive) or ``knob=A,B,C``."""
    name, sep, values = spec.partition("=")
    name = name.strip()
    if not sep or name not in KNOBS:
        raise ValueError(f"--sweep {spec!r}: expected KNOB=LO:HI[:STEP] with KNOB one of {', '.join(KNOBS)}")
    try:
        if ":" in values:
            parts = [int(v) for v in values.split(":")]
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] <= 0):
                raise ValueError
            lo, hi, by = parts[0], parts[1], parts[2] if len(parts) == 3 else 1
            grid = list(range(lo, hi + 1, by))
        else:
            grid = [int(v) for v in values.split(",")]
    except ValueError:
        raise ValueError(f"--sweep {spec!r}: values must be integers LO:HI[:STEP] or A,B,C") from None
    if not grid:
        raise ValueError(f"--sweep {spec!r}: empty range")
    return name, grid


def grid(sweeps: list[tuple[str, list[int]]]) -> list[dict[str, int]]:
    names = [n for n, _ in sweeps]
    return [dict(zip(names, point)) for point in itertools.product(*(v for _, v in sweeps))] or [{}]


def with_knobs(fleet: FleetConfig, knobs: dict[str, int]) -> FleetConfig:
    """The fleet with ``knobs`` set in the global block (agent blocks that set a knob keep theirs)."""
    if not knobs:
        return fleet
    block = dict(fleet.global_block or {})
    for name, value in knobs.items():
        outer, _, inner = name.partition(".")
        if inner:
            nested = block.get(outer)
            block[outer] = {**(nested if isinstance(nested, dict) else {}), inner: value}
        else:
            block[name] = value
    return FleetConfig(block, fleet.agent_blocks, fleet.global_ext, fleet.agent_ext)


# ------------------------------------------------------------------ counting


class _Tally:
    """Per (agent, detector): runs per action, first calls, refused calls and loop usage."""

    __slots__ = (
        "warned",
        "blocked",
        "aborted",
        "first_warn",
        "first_block",
        "cut_calls",
        "cut_tokens",
        "loop_tokens",
        "loop_cost",
    )

    def __init__(self) -> None:
        self.warned: set[int] = set()
        self.blocked: set[int] = set()
        self.aborted: set[int] = set()
        self.first_warn: dict[int, int] = {}
        self.first_block: dict[int, int] = {}
        self.cut_calls = self.cut_tokens = self.loop_tokens = 0
        self.loop_cost = 0.0


def enforcing(fleet: FleetConfig) -> FleetConfig:
    """The fleet with ``loopwarden.shadow`` off everywhere: tune asks what enforcing would do."""

    def unshadowed(block):
        return {k: v for k, v in block.items() if k != "shadow"} if isinstance(block, dict) else block

    agent_ext = {agent: unshadowed(block) for agent, block in fleet.agent_ext.items()}
    return FleetConfig(fleet.global_block, fleet.agent_blocks, unshadowed(fleet.global_ext), agent_ext)


def decisions(prep: Prepared, fleet: FleetConfig, tick=None) -> Iterator[tuple[int, EventDecision]]:
    """Each event's decision (:func:`~loopwarden.detection.decision.decide_event`, as in replay and
    the worker), with its index in ``prep.events``. Runs no setting can detect anything in are
    skipped unless a fleet-wide extension is on (its incidents may block any run's calls)."""
    states: dict = {}
    resolve, extensions_of = fleet.resolve, fleet.extensions_of
    events, keys, lines = prep.events, prep.keys, prep.lines
    fleet_side = None
    if fleet.fleet_wide():
        from loopwarden.fleet.offline import FleetTrace

        fleet_side = FleetTrace(fleet)
    board = fleet_side.board if fleet_side is not None else None
    for j, i in enumerate(prep.active if fleet_side is None else range(len(events))):
        if tick is not None and not j & 4095:
            tick(i)
        event = events[i]
        key = keys[i]
        agent = event.agent_id
        before = states.get(key)
        d = decide_event(
            before, event, resolve(agent), extensions_of(event), now=event.ts or 0.0, origin=lines[i], board=board
        )
        if d.state is None:
            states.pop(key, None)
        else:
            states[key] = d.state
        if fleet_side is not None:
            fleet_side.after(before, event, d)
        yield i, d


def run_setting(prep: Prepared, fleet: FleetConfig, tick=None) -> dict[tuple[str, str], _Tally]:
    """Count one setting's decisions over the prepared trace per (agent, detector)."""
    tallies: dict[tuple[str, str], _Tally] = {}
    calls, tokens, runs, agents = prep.calls, prep.tokens, prep.runs, prep.run_agents
    for i, d in decisions(prep, fleet, tick):
        charge = d.charge
        if not d.detections and not d.escalations and charge is None:
            continue
        run = runs[i]
        if charge is not None:
            t = tallies.get((agents[run], charge.detector))
            if t is None:
                t = tallies[(agents[run], charge.detector)] = _Tally()
            t.loop_tokens += charge.tokens
            t.loop_cost += charge.cost or 0.0
        for det in (*d.detections, *(v.detection for v in d.escalations)):
            t = tallies.get((agents[run], det.detector))
            if t is None:
                t = tallies[(agents[run], det.detector)] = _Tally()
            action = det.action
            if action == "warn":
                if det.emitted:
                    t.warned.add(run)
                    t.first_warn.setdefault(run, calls[i])
                continue
            if action == "block":
                t.blocked.add(run)
                t.cut_calls += 1
                t.cut_tokens += tokens[i]
                t.first_block.setdefault(run, calls[i])
            else:
                t.aborted.add(run)
                t.first_block.setdefault(run, calls[i])  # on the result of the run's latest call
    return tallies


def _median(values) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def _merge(tallies: Iterable[_Tally], runs: int) -> Counts:
    warned, blocked, aborted = set(), set(), set()
    first_warn: dict[int, int] = {}
    first_block: dict[int, int] = {}
    out = Counts(runs=runs)
    for t in tallies:
        warned |= t.warned
        blocked |= t.blocked
        aborted |= t.aborted
        for run, call in t.first_warn.items():
            first_warn[run] = min(call, first_warn.get(run, call))
        for run, call in t.first_block.items():
            first_block[run] = min(call, first_block.get(run, call))
        out.cut_calls += t.cut_calls
        out.cut_tokens += t.cut_tokens
        out.loop_tokens += t.loop_tokens
        out.loop_cost += t.loop_cost
    out.warned, out.blocked, out.aborted = len(warned), len(blocked), len(aborted)
    out.first_warn_call, out.first_block_call = _median(first_warn.values()), _median(first_block.values())
    out.loop_cost = round(out.loop_cost, 6)
    if not out.runs:
        out.runs = len(warned | blocked | aborted)
    return out


def summarize(prep: Prepared, knobs: dict[str, int], tallies: dict[tuple[str, str], _Tally]) -> Setting:
    runs_per_agent: dict[str, int] = {}
    for agent in prep.run_agents:
        runs_per_agent[agent] = runs_per_agent.get(agent, 0) + 1
    by_detector: dict[str, list[_Tally]] = {}
    by_agent: dict[str, list[_Tally]] = {}
    for (agent, detector), t in tallies.items():
        by_detector.setdefault(detector, []).append(t)
        by_agent.setdefault(agent, []).append(t)
    return Setting(
        knobs=knobs,
        fleet=_merge(tallies.values(), len(prep.run_agents)),
        by_detector={d: _merge(ts, 0) for d, ts in sorted(by_detector.items())},
        by_agent={a: _merge(ts, runs_per_agent[a]) for a, ts in sorted(by_agent.items())},
    )


def memo_room(entries: int = 1 << 40):
    """Let the engine's payload memos hold a whole trace: hash once, not once per setting."""
    return _memo_room(entries)


@contextmanager
def _memo_room(entries: int) -> Iterator[None]:
    """Let the engine's payload memos hold a whole trace for the sweep: hash once, not once per setting."""
    memos = (HASHER.calls, HASHER.results, HASHER.errors)
    limits = [m.limit for m in memos]
    for m in memos:
        m.limit = max(m.limit, entries + 1)
    try:
        yield
    finally:
        for m, limit in zip(memos, limits):
            m.limit = limit
            if len(m.entries) > limit:
                m.entries.clear()


_FORKED: tuple[Prepared, FleetConfig] | None = None  # what pool workers inherit (set only around a pool)


def _one_setting(knobs: dict[str, int]) -> Setting:
    prep, fleet = _FORKED
    with _memo_room(len(prep.events)):
        return summarize(prep, knobs, run_setting(prep, with_knobs(fleet, knobs)))


def tune(prep: Prepared, fleet: FleetConfig, points: list[dict[str, int]], progress=None, jobs: int = 1) -> Report:
    """Every point of the grid through ``step()``; ``progress(done_events)`` is called now and then.

    With ``jobs`` > 1 the settings are shared among forked processes (each inherits the decoded trace).
    """
    global _FORKED
    start = time.perf_counter()
    fleet = enforcing(fleet)
    settings: list[Setting] = []
    n = len(prep.events)
    jobs = min(jobs, len(points))
    if jobs > 1:
        import multiprocessing

        _FORKED = (prep, fleet)
        try:
            with multiprocessing.get_context("fork").Pool(jobs) as pool:
                for setting in pool.imap(_one_setting, points):
                    settings.append(setting)
                    if progress is not None:
                        progress(len(settings) * n)
        finally:
            _FORKED = None
    else:
        with _memo_room(n if len(points) > 1 else 0):
            for k, knobs in enumerate(points):
                tick = None if progress is None else (lambda i, base=k * n: progress(base + i))
                settings.append(summarize(prep, knobs, run_setting(prep, with_knobs(fleet, knobs), tick)))
    if progress is not None:
        progress(len(points) * n)
    return Report(
        events=n,
        runs=len(prep.run_agents),
        bad_lines=prep.bad_lines,
        has_usage=prep.has_usage,
        settings=settings,
        seconds=round(time.perf_counter() - start, 3),
    )


# ------------------------------------------------------------------ output


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


_COLUMNS = (
    ("runs", "runs"),
    ("warned", "warned"),
    ("blocked", "blocked"),
    ("aborted", "aborted"),
    ("first_warn_call", "warn@call"),
    ("first_block_call", "block@call"),
    ("cut_calls", "cut calls"),
    ("cut_tokens", "cut tokens"),
    ("loop_tokens", "loop tokens"),
)


def _columns(report: Report) -> list[tuple[str, str]]:
    return [c for c in _COLUMNS if report.has_usage or c[0] not in ("cut_tokens", "loop_tokens")]


def render(report: Report, console, top: int) -> None:
    from rich.table import Table

    cols = _columns(report)
    console.print(
        f"{report.events} events, {report.runs} runs, {len(report.settings)} setting(s), "
        f"{report.seconds} s" + (f", {report.bad_lines} bad lines skipped" if report.bad_lines else "")
    )
    if len(report.settings) == 1:
        setting = report.settings[0]
        for title, rows in (("by detector", setting.by_detector), (f"by agent (top {top} by blocked)", None)):
            table = Table(title=title, title_justify="left")
            table.add_column("detector" if rows is not None else "agent")
            for _, head in cols:
                table.add_column(head, justify="right")
            if rows is None:
                rows = dict(
                    sorted(setting.by_agent.items(), key=lambda kv: (-kv[1].blocked, -kv[1].warned, kv[0]))[:top]
                )
            for name, counts in rows.items():
                table.add_row(name, *(_fmt(getattr(counts, f)) for f, _ in cols))
            table.add_row("all", *(_fmt(getattr(setting.fleet, f)) for f, _ in cols), style="bold")
            console.print(table)
        return
    knobs = list(report.settings[0].knobs)
    table = Table(title="sweep (whole fleet)", title_justify="left")
    for k in knobs:
        table.add_column(k, justify="right", style="cyan")
    for _, head in cols[1:]:
        table.add_column(head, justify="right")
    for s in report.settings:
        table.add_row(*(str(s.knobs[k]) for k in knobs), *(_fmt(getattr(s.fleet, f)) for f, _ in cols[1:]))
    console.print(table)


class Series(msgspec.Struct, frozen=True, kw_only=True):
    """One line of a chart: the settings of the other knobs it stands for, and its points."""

    labels: list[str]  # one per merged setting of the other knobs ("" when there is no other knob)
    xs: list[int]
    ys: list[int]


PLOTTED = (("blocked", "blocked runs", "runs blocked"), ("cut_calls", "cut calls", "calls refused"))


def plot_series(report: Report, field: str) -> list[Series]:
    """A chart's lines (``field`` of the fleet counts against the first knob): one per setting of
    the knobs after the first, identical lines merged into one.

    Many settings of a second knob often give exactly the same counts (a critical threshold
    above every streak in the trace); drawn apart, those lines lie on top of each other and
    only the last one shows. Merged, the legend names every setting the line stands for.
    """
    knobs = list(report.settings[0].knobs)
    x_knob, others = knobs[0], knobs[1:]
    groups: dict[tuple, list[Setting]] = {}
    for s in report.settings:
        groups.setdefault(tuple(s.knobs[k] for k in others), []).append(s)
    merged: dict[tuple, list[str]] = {}
    for group, settings in groups.items():
        xs = tuple(s.knobs[x_knob] for s in settings)
        ys = tuple(getattr(s.fleet, field) for s in settings)
        merged.setdefault((xs, ys), []).append(", ".join(f"{k}={v}" for k, v in zip(others, group)))
    return [Series(labels=labels, xs=list(xs), ys=list(ys)) for (xs, ys), labels in merged.items()]


def _legend_label(labels: list[str]) -> str:
    shown = "; ".join(labels[:4]) + (f"; +{len(labels) - 4} more" if len(labels) > 4 else "")
    return shown if len(labels) == 1 else f"{shown} (same counts)"


def draw(report: Report):
    """The sweep chart as a matplotlib Figure: blocked runs and cut calls against the first knob,
    whole-number ticks, each chart's legend below it (never over its data)."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit(f"loopwarden tune --plot needs matplotlib: {extra_hint('plot')}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    knobs = list(report.settings[0].knobs)
    if not knobs:
        raise SystemExit("loopwarden tune --plot needs --sweep")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    markers = "os^Dvx*+"
    for ax, (field, title, ylabel) in zip(axes, PLOTTED):
        series = plot_series(report, field)
        for i, line in enumerate(series):
            label = _legend_label(line.labels) if line.labels != [""] else None
            ax.plot(line.xs, line.ys, marker=markers[i % len(markers)], label=label, alpha=0.85)
        ax.set(xlabel=knobs[0], ylabel=ylabel, title=title)
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # knobs and counts are whole numbers
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(bottom=0)
        if len(knobs) > 1 and len(series) <= 12:
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize="small", frameon=False)
    fig.suptitle(f"loopwarden tune: {report.events} events, {report.runs} runs")
    fig.tight_layout()  # takes the legends below the charts into account
    return fig


def plot(report: Report, path: str) -> None:
    """Write :func:`draw`'s chart to ``path``."""
    import matplotlib.pyplot as plt

    fig = draw(report)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def split_sweep(sweep: list[str] | None, traces: list[str]) -> tuple[list[str], list[str]]:
    """(knobs, traces): ``--sweep`` takes every word after it, so trace paths given after its
    ``KNOB=...`` specs land there too; a word without ``=`` is a trace."""
    words = sweep or []
    return [w for w in words if "=" in w], [*traces, *(w for w in words if "=" not in w)]


def run(args) -> int:
    with memo_room():  # decoding hashes every payload once; the sweep reuses them
        return _run(args)


def _run(args) -> int:
    knobs, traces = split_sweep(args.sweep, args.traces)
    if not traces:
        print("loopwarden tune: no TRACE given (JSONL event files or directories)", file=sys.stderr)
        return 2
    for trace in traces:  # before the config's notices: a missing trace is the one line to see
        if not Path(trace).exists():
            raise UsageError(f"cannot read {trace}: no such file or directory")
    fleet = load_checked(args.config, lambda text: print(f"loopwarden tune: {text}", file=sys.stderr))
    if fleet is None:
        return 2
    try:
        sweeps = [parse_sweep(s) for s in knobs]
    except (ConfigError, ValueError) as exc:
        print(f"loopwarden tune: {exc}", file=sys.stderr)
        return 2
    files = trace_files(traces)
    try:
        prep = prepare(_lines(files), fleet.uses_profile())
    except OSError as exc:
        print(f"loopwarden tune: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    points = grid(sweeps)
    if sweeps and fleet.uses_profile():
        print(
            "loopwarden tune: note: agents with loopwarden.profile openclaw-latest ignore the swept knobs "
            "(its thresholds are fixed); their counts are the same at every point",
            file=sys.stderr,
        )
    jobs = max(args.jobs, 1)
    from rich.console import Console

    err = Console(stderr=True)
    if err.is_terminal and not args.json:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        # auto_refresh off: no refresh thread alive when the pool forks
        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=err,
            transient=True,
            auto_refresh=False,
        ) as bar:
            task = bar.add_task(
                f"{len(points)} setting(s) x {len(prep.events)} events", total=len(points) * len(prep.events)
            )

            def advance(done: int) -> None:
                bar.update(task, completed=done)
                bar.refresh()

            report = tune(prep, fleet, points, advance, jobs)
    else:
        report = tune(prep, fleet, points, jobs=jobs)
    if args.plot:
        plot(report, args.plot)
    if args.json:
        sys.stdout.buffer.write(msgspec.json.encode(report) + b"\n")
    else:
        out = Console()
        render(report, out if out.is_terminal else Console(width=160), args.top)
        if args.plot:
            print(f"wrote {args.plot}")
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "tune",
        help="what a config would warn, block and abort in recorded traces (and over a --sweep grid)",
        description="Run recorded traces (replay's JSONL format; files or directories) through the "
        "detection engine under a config, or under every point of a --sweep grid, and count per "
        "detector and per agent the runs warned, blocked and aborted, at which call, and the calls "
        "and tokens blocks would cut.",
    )
    # nargs="*": a trace may also come after --sweep's specs (split_sweep sorts them out)
    p.add_argument("traces", nargs="*", metavar="TRACE", help="JSONL event files or directories of them")
    p.add_argument("--config", metavar="FILE", help="OpenClaw-shaped config (JSON or JSON5)")
    p.add_argument(
        "--sweep",
        nargs="+",
        metavar="KNOB=LO:HI[:STEP]",
        help=f"vary loopDetection knobs over a grid ({', '.join(KNOBS)})",
    )
    p.add_argument("--plot", metavar="FILE.png", help="chart blocked runs and cut calls against the first knob")
    p.add_argument("--json", action="store_true", help="print the report as one JSON document")
    p.add_argument("--jobs", type=int, default=1, help="processes for a sweep (forked; worth it on idle cores)")
    p.add_argument("--top", type=int, default=20, help="agents shown in the table (all are in --json)")
    p.set_defaults(func=run)
