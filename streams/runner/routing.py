"""Where a run's verdicts go: its callbacks and the iterators of :meth:`Run.verdicts`.

Kept apart from the client so that :mod:`loopwarden.runner.run` can name these
types without importing the client (no import circle).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from loopwarden.runner.state import RunState
from loopwarden.schemas.verdicts import Verdict

VerdictCallback = Callable[[Verdict], Any]
CLOSED = object()


class RunEntry:
    """A registered run: its state, callbacks and iterator queues."""

    __slots__ = ("state", "callbacks", "queues")

    def __init__(self) -> None:
        self.state = RunState()
        self.callbacks: list[VerdictCallback] = []
        self.queues: list[asyncio.Queue] = []


class VerdictStream:
    """Async iterator over one run's verdicts; subscribed when created, so nothing is missed."""

    def __init__(self, queue: asyncio.Queue) -> None:
        self._queue = queue
        self._done = False

    def __aiter__(self) -> VerdictStream:
        return self

    async def __anext__(self) -> Verdict:
        if self._done:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is CLOSED:
            self._done = True
            raise StopAsyncIteration
        return item
