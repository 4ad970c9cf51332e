"""The worker's log: one format, and only its own lines at the default level.

At ``info`` (the default) a worker says three things: that it starts (version,
broker, topics, whether detection is on), that it is ready, that it stops;
plus warnings and errors. Faust's, mode's and aiokafka's start-up chatter
shows only at ``debug``. Both the worker command and the Faust worker class
(:class:`loopwarden.worker.app.Worker`, in place of mode's own set-up) call
:func:`setup_logging`, so there is one handler and one format.
"""

from __future__ import annotations

import importlib
import logging
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Libraries whose info lines are start-up and rebalance chatter: shown from debug only.
CHATTY = ("faust", "mode", "aiokafka", "kafka", "aiohttp", "asyncio")


class LibraryChatter(logging.Filter):
    """Drops records below warning made by the chatty libraries' code, whatever logger they use:
    mode's services log through the logger of their class's module, so Faust's "Starting..."
    lines of our own App and Consumer subclasses come out as ``loopwarden.*``."""

    def __init__(self) -> None:
        super().__init__()
        dirs: list[str] = []
        for name in CHATTY:
            try:
                dirs += list(getattr(importlib.import_module(name), "__path__", ()))
            except ImportError:  # not installed: none of its records to drop
                continue
        self.dirs = tuple(d.rstrip("/") + "/" for d in dirs)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.pathname.startswith(self.dirs)


def level_of(level: str | int) -> int:
    return level if isinstance(level, int) else logging.getLevelName(str(level).upper())


def setup_logging(level: str | int) -> None:
    """One stderr handler with :data:`FORMAT` on the root logger, at ``level``; the chatty
    libraries at warning unless ``level`` is debug."""
    lvl = level_of(level)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT))
    if lvl > logging.DEBUG:
        handler.addFilter(LibraryChatter())
    root.addHandler(handler)
    root.setLevel(lvl)  # on the logger itself: a debug call below it builds no record
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.NOTSET if lvl <= logging.DEBUG else max(lvl, logging.WARNING))


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("loopwarden")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"
