"""The runs a client drives, and the hand-over of a verdict to one of them.

A run is registered under its ident (run key, agent, session: the worker's
state key) and counted under its run key, which is what the verdict listener
sees before it decodes a record (:meth:`RunRegistry.has_key`). Delivering a
verdict updates the run's state and calls its callbacks and iterators; a
callback that raises is counted, never raised into the client.
"""

from __future__ import annotations

import asyncio
import logging

from loopwarden.runner.routing import CLOSED, RunEntry, VerdictCallback, VerdictStream
from loopwarden.runner.state import ClientStats, RunState
from loopwarden.runner.wire import Ident
from loopwarden.schemas.verdicts import Verdict

log = logging.getLogger(__name__)


class RunRegistry:
    """Registered runs by ident, and how many are registered under each run key."""

    __slots__ = ("runs", "keys", "_stats")

    def __init__(self, stats: ClientStats) -> None:
        self.runs: dict[Ident, RunEntry] = {}
        self.keys: dict[str, int] = {}  # run key -> runs registered under it (the listener keeps their records)
        self._stats = stats

    def register(self, key: Ident, callback: VerdictCallback | None = None) -> RunState:
        entry = self.runs.get(key)
        if entry is None:
            entry = self.runs[key] = RunEntry()
            self.keys[key[0]] = self.keys.get(key[0], 0) + 1
        if callback is not None:
            entry.callbacks.append(callback)
        return entry.state

    def unregister(self, key: Ident) -> None:
        entry = self.runs.pop(key, None)
        if entry is not None:
            left = self.keys.get(key[0], 1) - 1
            if left > 0:
                self.keys[key[0]] = left
            else:
                self.keys.pop(key[0], None)
            for queue in entry.queues:
                queue.put_nowait(CLOSED)

    def close(self) -> None:
        """Unregister every run: their iterators end."""
        for key in list(self.runs):
            self.unregister(key)

    def state(self, key: Ident) -> RunState | None:
        entry = self.runs.get(key)
        return entry.state if entry is not None else None

    def verdicts(self, key: Ident) -> VerdictStream:
        entry = self.runs.get(key)
        queue: asyncio.Queue = asyncio.Queue()
        if entry is None:
            queue.put_nowait(CLOSED)
        else:
            entry.queues.append(queue)
        return VerdictStream(queue)

    def deliver(self, entry: RunEntry | None, verdict: Verdict, *, remember: bool = True) -> None:
        """Hand a verdict to the run: its state (unless a gate answered it), callbacks and iterators."""
        if entry is None:
            return
        if remember or verdict.action == "abort":
            entry.state.apply(verdict)
        self._stats.verdicts_delivered += 1
        for callback in entry.callbacks:
            try:
                callback(verdict)
            except Exception:  # noqa: BLE001
                self._stats.callback_errors += 1
                log.exception("verdict callback failed")
        for queue in entry.queues:
            queue.put_nowait(verdict)
