"""Percentiles of measured samples and CPU seconds of processes: one definition for every benchmark."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1) of already sorted samples; NaN for none."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(len(sorted_values), rank) - 1]


class CpuMeter:
    """CPU seconds of the worker, the broker and this process (the runners) between two marks."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.tick = os.sysconf("SC_CLK_TCK")
        self._start: dict[str, float] = {}
        self._t0 = 0.0

    def seconds(self) -> dict[str, float]:
        """CPU seconds used so far by each process (``runners`` = this process)."""
        return self._now()

    def _now(self) -> dict[str, float]:
        out = {"runners": time.process_time()}
        for name, pid in self.pids.items():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                out[name] = (int(fields[11]) + int(fields[12])) / self.tick  # utime + stime
            except (OSError, IndexError, ValueError):
                out[name] = float("nan")
        return out

    def mark(self) -> None:
        self._start, self._t0 = self._now(), time.monotonic()

    def percent(self) -> dict[str, float]:
        wall = max(1e-9, time.monotonic() - self._t0)
        now = self._now()
        return {k: round(100 * (now[k] - self._start.get(k, now[k])) / wall, 1) for k in now}


def machine_stalls(seconds: float = 2.0) -> dict[str, float]:
    """How often this machine takes the CPU away: a loop reading the clock for ``seconds`` counts the
    gaps over 0.2 ms and over 1 ms (per second) and the longest. On a shared or virtual machine they
    set the floor of any p99 under a millisecond, so latency benches report them beside their tails."""
    start = last = time.perf_counter()
    end = start + seconds
    over_02 = over_1 = 0
    longest = 0.0
    while last < end:
        now = time.perf_counter()
        gap = now - last
        if gap > 2e-4:
            over_02 += 1
            over_1 += gap > 1e-3
            longest = max(longest, gap)
        last = now
    return {
        "gaps_over_0.2ms_per_s": round(over_02 / seconds, 1),
        "gaps_over_1ms_per_s": round(over_1 / seconds, 1),
        "longest_gap_ms": round(longest * 1e3, 3),
    }
