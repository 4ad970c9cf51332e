"""The Faust worker class of loopwarden (the app's ``Worker`` setting): log level that sticks.

Private name used: ``mode.Worker._setup_logging`` (checked by tests/unit/test_internals_contract.py).
mode leaves the root logger at DEBUG and filters in its handlers, so every
client debug call would build a log record; we set the root level itself.
"""

from __future__ import annotations

import logging

import faust


class Worker(faust.Worker):
    def _setup_logging(self) -> None:
        super()._setup_logging()
        if self.loglevel:
            logging.getLogger().setLevel(
                self.loglevel if isinstance(self.loglevel, int) else logging.getLevelName(str(self.loglevel).upper())
            )
