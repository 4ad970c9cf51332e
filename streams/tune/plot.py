"""The report as a chart (matplotlib, the ``plot`` extra): blocked runs and cut calls against a knob."""

from __future__ import annotations

import msgspec

from loopwarden import extra_hint
from loopwarden.tune.counting import Report, Setting


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
