"""Fleet-wide detection: what no single runner can see (extensions, off by default).

Pure code (no Faust, no Kafka), shared by the worker and ``loopwarden replay --incidents``:

- :mod:`.joins`: from one run's step, the signals it sends to the fleet side, a
  *join* of a failure signature (a streak of the same tool and outcome, whatever
  the arguments, or the same unknown tool) and, at its end, its fingerprint;
- :mod:`.fingerprint`: the failure fingerprint, an outcome with what varies between
  machines and runs taken out (paths, ids, times, pids, ports, counters), versioned;
- :mod:`.incidents`: per signature, the incident state machine (open, update,
  resolved), windowed by the events' own ``ts``;
- :mod:`.crossrun`: per session, ``cross_run_repeat`` over finished runs;
- :mod:`.offline`: all of it over one ordered trace (replay, tests).
"""

from loopwarden.schemas.fleet import FinishedRun, Incident, JoinSignal

__all__ = ["FinishedRun", "Incident", "JoinSignal"]
