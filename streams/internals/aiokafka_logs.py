"""Rate-limiting aiokafka's own log lines while a runner client is open.

With the broker down, aiokafka logs every connection and metadata retry at
ERROR (about ten lines a second per client). The runner client words an
outage itself (:class:`loopwarden.runner.outbox.Outage`), so while a client
is open a filter on aiokafka's loggers lets through the first ``burst``
lines of each message per ``interval`` and then one line saying how many
were suppressed. The logger names are aiokafka's module names (an internal
detail, hence this module); the filter is removed when the last client
closes.
"""

from __future__ import annotations

import logging
import time

LOGGERS = (
    "aiokafka",
    "aiokafka.conn",
    "aiokafka.cluster",
    "aiokafka.consumer.consumer",
    "aiokafka.consumer.fetcher",
    "aiokafka.consumer.group_coordinator",
    "aiokafka.producer.producer",
    "aiokafka.producer.sender",
)
MAX_KEYS = 256


class RateLimit(logging.Filter):
    """Per (logger, message template): ``burst`` records per ``interval``, then a count of the rest."""

    def __init__(self, interval: float = 60.0, burst: int = 3) -> None:
        super().__init__()
        self.interval = interval
        self.burst = burst
        self._windows: dict[tuple[str, str], list] = {}  # key -> [window start, passed, suppressed]
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, str(record.msg))
        now = time.monotonic()
        window = self._windows.get(key)
        if window is None or now - window[0] >= self.interval:
            if len(self._windows) >= MAX_KEYS:
                self._windows.clear()
            skipped = window[2] if window is not None else 0
            self._windows[key] = [now, 1, 0]
            if skipped:
                record.msg = f"{record.msg} [{skipped} similar lines suppressed in {self.interval:.0f}s]"
            return True
        if window[1] < self.burst:
            window[1] += 1
            return True
        window[2] += 1
        self.suppressed += 1
        return False


class _Installed:
    def __init__(self) -> None:
        self.users = 0
        self.filter: RateLimit | None = None


_state = _Installed()


def quiet(interval: float = 60.0) -> None:
    """Install the filter (once, however many clients are open)."""
    _state.users += 1
    if _state.filter is None:
        _state.filter = RateLimit(interval)
        for name in LOGGERS:
            logging.getLogger(name).addFilter(_state.filter)


def unquiet() -> None:
    """Remove it when the last client closes."""
    _state.users = max(0, _state.users - 1)
    if _state.users == 0 and _state.filter is not None:
        for name in LOGGERS:
            logging.getLogger(name).removeFilter(_state.filter)
        _state.filter = None
