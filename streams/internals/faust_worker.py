"""A Faust worker class whose logging set-up is the caller's (the app's ``Worker`` setting).

Private name used: ``mode.Worker._setup_logging`` (checked by tests/internals/test_internals_contract.py).
mode's own set-up adds a second handler in its own format and leaves the root
logger at DEBUG, filtering in its handlers (so every client debug call would
build a log record); a subclass of this one names the function that sets up
logging instead (``setup_logging``, called with the level), so the worker keeps
one format, the level on the root logger itself, and this package imports
nothing of the worker's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import faust


def _no_setup(level: str) -> None:
    """Leave logging as it is (a subclass names the real set-up)."""


class Worker(faust.Worker):
    setup_logging: ClassVar[Callable[[str], None]] = staticmethod(_no_setup)

    def _setup_logging(self) -> None:
        type(self).setup_logging(self.loglevel or "info")
        self.spinner = None  # Faust's terminal spinner: mode's set-up drops it below warning, so do we
