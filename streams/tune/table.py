"""The report as a table (rich): the fleet, then per detector and per agent."""

from __future__ import annotations

from loopwarden.tune.counting import Report


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
