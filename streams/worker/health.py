"""Health that tells the truth: crashed services, a stuck event loop, and a watchdog that exits.

``/healthz`` answers 503 with the reasons when Faust's consumer, fetcher or
producer (or the app itself) has crashed, or when the event loop missed its
heartbeat for longer than ``stall_timeout``. The web server runs on that same
loop, so while the loop is stuck the probe times out (a failure to
Kubernetes too); the :class:`Watchdog` thread sees the stall from outside
and, when the worker has been unhealthy for ``exit_after`` seconds, exits the
process non-zero so the orchestrator restarts it. Offsets are committed only
for durable batches, so exiting loses nothing.

The watchdog thread needs the GIL to run; code that holds it for long (a C
routine such as a regular expression or a parser on a hostile value) stops
it as well as the loop. :class:`StallExit` covers that case: it arms
:func:`faulthandler.dump_traceback_later`, whose timer is a C thread that
needs no GIL, and the loop re-arms it on every heartbeat; a loop silent for
``stall_exit_after`` seconds gets every thread's traceback written to stderr
and the process exits with code 1.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

EXIT_UNHEALTHY = 70


def crashed_services(services: dict[str, Any]) -> list[str]:
    """One reason per crashed mode service (``name: crashed (reason)``)."""
    reasons = []
    for name, service in services.items():
        if service is not None and getattr(service, "crashed", False):
            reasons.append(f"{name} crashed: {getattr(service, 'crash_reason', None)!r}")
    return reasons


class Health:
    """The loop's heartbeat and the failure reasons, shared by ``/healthz`` and the watchdog."""

    def __init__(
        self,
        stall_timeout: float,
        services: Callable[[], dict[str, Any]] = dict,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stall_timeout = stall_timeout
        self.services = services
        self.clock = clock
        self.last_beat = clock()
        self.crashed: list[str] = []  # refreshed on the loop (services are not thread-safe to inspect)

    def beat(self) -> None:
        """Called on the event loop every fraction of ``stall_timeout``."""
        self.last_beat = self.clock()
        self.crashed = crashed_services(self.services())

    def stalled_for(self) -> float:
        return max(0.0, self.clock() - self.last_beat)

    def reasons(self) -> list[str]:
        out = list(self.crashed)
        stalled = self.stalled_for()
        if stalled > self.stall_timeout:
            out.append(f"event loop stalled for {stalled:.1f}s (limit {self.stall_timeout:.1f}s)")
        return out

    def report(self) -> tuple[int, dict]:
        """(HTTP status, body) of ``/healthz``."""
        reasons = self.reasons()
        return (503, {"ok": False, "reasons": reasons}) if reasons else (200, {"ok": True})


class Watchdog(threading.Thread):
    """Exits the process once the worker has been unhealthy for ``exit_after`` seconds."""

    def __init__(
        self, health: Health, exit_after: float, interval: float = 1.0, exit: Callable[[int], None] = os._exit
    ) -> None:
        super().__init__(name="loopwarden-watchdog", daemon=True)
        self.health = health
        self.exit_after = exit_after
        self.interval = interval
        self.exit = exit
        self.stop_event = threading.Event()

    def run(self) -> None:
        unhealthy_since: float | None = None
        while not self.stop_event.wait(self.interval):
            reasons = self.health.reasons()
            now = self.health.clock()
            if not reasons:
                unhealthy_since = None
                continue
            if unhealthy_since is None:
                unhealthy_since = now
                log.error("worker unhealthy: %s", "; ".join(reasons))
            if now - unhealthy_since >= self.exit_after:
                log.critical(
                    "worker unhealthy for %.0fs, exiting %d: %s",
                    now - unhealthy_since,
                    EXIT_UNHEALTHY,
                    "; ".join(reasons),
                )
                logging.shutdown()
                self.exit(EXIT_UNHEALTHY)
                return

    def stop(self) -> None:
        self.stop_event.set()


class StallExit:
    """Exit (code 1, tracebacks on stderr) when the loop has not called :meth:`beat` for ``timeout`` seconds.

    ``timeout`` 0 turns it off. faulthandler keeps one such timer per process: the worker owns it.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout

    def beat(self) -> None:
        """Called on the event loop: push the deadline ``timeout`` seconds ahead."""
        if self.timeout > 0:
            faulthandler.dump_traceback_later(self.timeout, exit=True)

    def stop(self) -> None:
        if self.timeout > 0:
            faulthandler.cancel_dump_traceback_later()
