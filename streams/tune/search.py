"""The grid search: every setting over one decoded trace, in this process or forked ones.

The payload hashes are memoized for the whole trace (:func:`memo_room`), so a further setting
costs only the rules; forked workers inherit the decoded trace and the memo (``_FORKED``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from loopwarden.detection.payloads import HASHER
from loopwarden.schemas.config import FleetConfig
from loopwarden.tune.counting import Report, Setting, run_setting, summarize
from loopwarden.tune.knobs import enforcing, with_knobs
from loopwarden.tune.trace import Prepared


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
