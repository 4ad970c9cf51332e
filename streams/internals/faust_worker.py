"""The Faust worker class of loopwarden (the app's ``Worker`` setting): loopwarden's logging.

Private name used: ``mode.Worker._setup_logging`` (checked by tests/unit/test_internals_contract.py).
mode's own set-up adds a second handler in its own format and leaves the root
logger at DEBUG, filtering in its handlers (so every client debug call would
build a log record); this one installs :func:`loopwarden.worker.logs.setup_logging`
instead: one format, the level on the root logger itself, Faust's chatter at debug.
"""

from __future__ import annotations

import faust

from loopwarden.worker.logs import setup_logging


class Worker(faust.Worker):
    def _setup_logging(self) -> None:
        setup_logging(self.loglevel or "info")
        self.spinner = None  # Faust's terminal spinner: mode's set-up drops it below warning, so do we
