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

Modules by concern: :mod:`~loopwarden.tune.trace` (a trace decoded once),
:mod:`~loopwarden.tune.knobs` (the grid and the config it sets),
:mod:`~loopwarden.tune.counting` (one setting's decisions, tallied),
:mod:`~loopwarden.tune.search` (every setting, the payload memo, forked jobs),
:mod:`~loopwarden.tune.table` and :mod:`~loopwarden.tune.plot` (the report
shown), :mod:`~loopwarden.tune.command` (the command).
"""

from loopwarden.tune.counting import Counts, Report, Setting, decisions, run_setting, summarize
from loopwarden.tune.knobs import KNOBS, enforcing, grid, parse_sweep, with_knobs
from loopwarden.tune.plot import draw, plot, plot_series
from loopwarden.tune.search import memo_room, tune
from loopwarden.tune.table import render
from loopwarden.tune.trace import Prepared, prepare, trace_files

__all__ = [
    "KNOBS",
    "Counts",
    "Prepared",
    "Report",
    "Setting",
    "decisions",
    "draw",
    "enforcing",
    "grid",
    "memo_room",
    "parse_sweep",
    "plot",
    "plot_series",
    "prepare",
    "render",
    "run_setting",
    "summarize",
    "trace_files",
    "tune",
    "with_knobs",
]
