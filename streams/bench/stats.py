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
