"""``loopwarden tune``: its arguments, the trace read, the search run, the report shown."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from loopwarden import UsageError
from loopwarden.schemas.config import ConfigError
from loopwarden.schemas.config_check import load_checked
from loopwarden.tune.knobs import KNOBS, grid, parse_sweep
from loopwarden.tune.plot import plot
from loopwarden.tune.search import memo_room, tune
from loopwarden.tune.table import render
from loopwarden.tune.trace import prepare, read_lines, trace_files


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
        prep = prepare(read_lines(files), fleet.uses_profile())
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
