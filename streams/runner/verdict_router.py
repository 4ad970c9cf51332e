"""Verdicts from the control topic, routed to the gate waiting for them or to their run.

The listener (:mod:`loopwarden.runner.listener`) asks :meth:`VerdictRouter.wants`
before it decodes a record, so other runs' records cost a key lookup. A
decoded verdict is dropped when it does not fit (identifiers no worker
writes), names no run or waiting gate of this client, names a call the run
never made, or repeats a ``verdict_id`` (bounded LRU); otherwise it answers
the waiting gate (worker mode), is dropped as agreed (local mode: the worker
said what the runner already decided) or is delivered to the run.
"""

from __future__ import annotations

import asyncio

import msgspec

from loopwarden.runner import wire
from loopwarden.runner.registry import RunRegistry
from loopwarden.runner.state import ClientStats, RecentIds, verdict_fits
from loopwarden.runner.text import verdict_text
from loopwarden.schemas.verdicts import Verdict

Waiters = dict[tuple[wire.Ident, str], asyncio.Future]


def as_seen(verdict: Verdict, own_tool: str | None) -> Verdict:
    """A worker's verdict as the runner hands it on: the run's own tool name, text built from fields."""
    return msgspec.structs.replace(verdict, tool_name=own_tool, message=verdict_text(verdict, own_tool or ""))


class VerdictRouter:
    """The listener's callbacks. ``waiters``/``waiting``: the gates of worker mode (shared with
    :class:`~loopwarden.runner.worker_checks.WorkerChecks`); ``local``: the runner decides itself."""

    def __init__(
        self,
        registry: RunRegistry,
        stats: ClientStats,
        waiters: Waiters,
        waiting: dict[str, int],
        *,
        dedup_size: int,
        local: bool,
    ) -> None:
        self.registry = registry
        self.stats = stats
        self.waiters = waiters
        self.waiting = waiting
        self.seen = RecentIds(dedup_size)
        self.local = local

    def wants(self, record_key: bytes) -> bool:
        """Whether a control record's key is a run of this client (the listener drops the rest undecoded)."""
        key = record_key.decode("utf-8", "replace")
        return key in self.registry.keys or key in self.waiting

    def on_undecodable(self) -> None:
        self.stats.undecodable += 1

    def on_foreign(self) -> None:
        self.stats.foreign_dropped += 1

    def on_rejected(self) -> None:
        self.stats.signature_rejected += 1

    def on_verdict(self, record_key: bytes | None, verdict: Verdict) -> None:
        stats = self.stats
        stats.verdicts_seen += 1
        if not verdict_fits(verdict):
            stats.undecodable += 1  # identifiers no worker writes: megabytes each, kept by the thousand
            return
        key = wire.ident(verdict, record_key)
        entry = self.registry.runs.get(key)
        waiter = self.waiters.get((key, verdict.tool_call_id)) if verdict.tool_call_id else None
        if entry is None and waiter is None:
            stats.foreign_dropped += 1
            return
        if waiter is None and not entry.state.owns(verdict):
            stats.verdicts_stale += 1  # an earlier run's verdict (same session key), or a call never made
            return
        if self.seen.seen(verdict.verdict_id):
            stats.duplicates_dropped += 1
            return
        # What the runner hands on (gates, callbacks, iterators, run.aborted) says what the model would
        # read: text from the verdict's fields, never the record's own message, and the tool named as this
        # run called it, never as the record says (loopwarden.runner.text).
        own = entry.state.tool_of(verdict.tool_call_id) or entry.state.last_tool if entry is not None else None
        verdict = as_seen(verdict, own)
        if waiter is not None and not waiter.done():
            waiter.set_result(verdict)  # the gate acts on it; a block is not remembered as pending,
            self.registry.deliver(entry, verdict, remember=False)  # but an abort ends the run
            return
        if entry is not None and self.local and entry.state.covers(verdict):
            stats.verdicts_agreed += 1  # the worker said what this runner already decided and acted on
            return
        if entry is not None and self.local:
            stats.corrections += 1  # stricter than the runner's own decision: applied to the next call
        self.registry.deliver(entry, verdict)
