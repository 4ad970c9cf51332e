"""What every framework adapter does, written once: gate a call, publish its outcome, ack.

An adapter maps its framework's notions (a tool call and its id, a thread
or trace, an agent name) to a :class:`~loopwarden.runner.wire.RunRef` and to
these calls; how the answer reaches the model (a tool message, a rejected
guardrail, a returned value) and how a run ends are the framework's own.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from msgspec import UNSET

from loopwarden.runner.results import as_shown
from loopwarden.runner.state import Decision

if TYPE_CHECKING:
    from loopwarden.runner.client import LoopClient
    from loopwarden.runner.run import Run
    from loopwarden.runner.wire import RunRef

log = logging.getLogger(__name__)

WARN_PREFIX = "\n\n[loopwarden] "


def warning_note(decision: Decision) -> str:
    """The text appended to a warned call's result (the model reads it with the result); under the
    openclaw-latest profile the release's system note, on a line of its own."""
    if decision.release:
        return "\n" + (decision.note or "")
    return WARN_PREFIX + (decision.message or "Warning: this looks like a tool-call loop.")


def block_message(decision: Decision) -> str:
    """What the model gets instead of a refused call's result."""
    return decision.message or "Tool call blocked by loop detection."


class Gate:
    """Runs by key (registered once, bounded), decisions for calls that have not finished yet."""

    def __init__(
        self, client: LoopClient, *, timeout: float | None = None, max_runs: int = 4096, max_pending: int = 4096
    ) -> None:
        self.client = client
        self.timeout = timeout
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._max_runs = max(1, max_runs)
        self._pending: OrderedDict[tuple[str, str], Decision] = OrderedDict()  # (run key, call id)
        self._ended_aborts: OrderedDict[str, Any] = OrderedDict()  # run key -> abort verdict of an ended run
        self._admitted: OrderedDict[tuple[str, str], Decision] = OrderedDict()  # (run key, call id): batch decisions
        self._max_pending = max(1, max_pending)
        self._logged = False  # the first failure of a check is logged, the rest only counted

    def run(self, ref: RunRef) -> Run:
        run = self._runs.get(ref.key)
        if run is None:
            run = self._runs[ref.key] = self.client.run(ref.agent_id, ref.session_id, ref.run_id)
            if len(self._runs) > self._max_runs:  # a runner that never ends its runs stays bounded
                _key, old = self._runs.popitem(last=False)
                self.client.unregister(old.ident)
        else:
            self._runs.move_to_end(ref.key)
        return run

    async def check(self, ref: RunRef, tool_name: str, args: Any, call_id: str | None) -> Decision:
        """Gate one call (never raises: loopwarden trouble allows the call)."""
        try:
            return await self.run(ref).check(tool_name, args, tool_call_id=call_id, timeout=self.timeout)
        except Exception:  # noqa: BLE001 - a bug here must not break the agent
            self.client.stats.fail_open_error += 1
            if not self._logged:
                self._logged = True
                log.exception("loopwarden check failed; the call is allowed (later failures are only counted)")
            call = self.run(ref).call(tool_name, None, call_id)
            return Decision(action="allow", source="error", call=call)

    async def admit(self, ref: RunRef, calls: list[tuple[str, Any, str | None]]) -> None:
        """Decide one assistant message's tool calls together, before any of them runs, when the run gets
        the release's bounded recovery (the openclaw-latest profile); :meth:`decide` then hands each call
        its decision. Otherwise (and on any trouble) nothing is decided here: each call is checked alone."""
        try:
            run = self.run(ref)
            built = [run.call(name, args, call_id) for name, args, call_id in calls if call_id]
            if not built or not self.client.bounded_recovery(built[0]):
                return
            decisions = await self.client.check_batch(built, self.timeout)
        except Exception:  # noqa: BLE001 - a bug here must not break the agent
            self.client.stats.fail_open_error += 1
            return
        for call, decision in zip(built, decisions, strict=True):
            self._admitted[(ref.key, call.tool_call_id or "")] = decision
            if len(self._admitted) > self._max_pending:
                self._admitted.popitem(last=False)

    async def decide(self, ref: RunRef, tool_name: str, args: Any, call_id: str | None) -> Decision:
        """The call's decision from its batch's admission, else a check of its own."""
        decision = self._admitted.pop((ref.key, call_id), None) if call_id else None
        return decision if decision is not None else await self.check(ref, tool_name, args, call_id)

    async def refused(self, decision: Decision) -> None:
        """The call did not run: publish the veto as its result (acks the block/abort)."""
        await self._quiet(self.client.tool_result(decision, result=decision.blocked_result()))

    async def finished(
        self, decision: Decision, *, result: Any = UNSET, error: Any = UNSET, warned: bool = False
    ) -> None:
        """The call ran: publish its outcome (as the model is shown it: ``results.as_shown``); ack a
        warning that reached the model with it."""
        if result is not UNSET:
            try:
                result = as_shown(self.client.encode(result))
            except Exception:  # noqa: BLE001 - an unencodable result is the encoder's to report, as before
                pass
        await self._quiet(self.client.tool_result(decision, result=result, error=error))
        if warned and decision.action == "warn" and decision.verdict is not None:
            await self._quiet(self.client.ack(decision.verdict, "applied", "warning appended to the call's result"))

    # frameworks whose hooks split "before the tool" from "after the tool"

    async def before(self, ref: RunRef, tool_name: str, args: Any, call_id: str | None) -> Decision:
        """Decide a call before it runs: a refused call's veto is published, an allowed call's decision
        is held (by run and call id) for :meth:`after`."""
        decision = await self.decide(ref, tool_name, args, call_id)
        if not decision.proceed:
            await self.refused(decision)
        elif call_id:
            self.hold(ref.key, call_id, decision)
        return decision

    async def after(self, ref: RunRef, call_id: str | None, *, result: Any = UNSET, error: Any = UNSET) -> str | None:
        """Publish the outcome of a call :meth:`before` allowed; the text to append to its result when it
        carries a warning (acknowledged here), else None (also for a call this gate did not hold)."""
        decision = self.take(ref.key, call_id) if call_id else None
        if decision is None:
            return None
        warned = error is UNSET and decision.action == "warn"
        await self.finished(decision, result=result, error=error, warned=warned)
        return warning_note(decision) if warned else None

    async def compaction_retry(self, ref: RunRef, reason: str | None = None) -> None:
        await self._quiet(self.run(ref).compaction_retry(reason))

    async def end(self, ref: RunRef) -> None:
        """Publish ``run_end`` (acks an abort) and forget the run (an abort is remembered, bounded)."""
        run = self._runs.pop(ref.key, None) or self.client.run(ref.agent_id, ref.session_id, ref.run_id)
        if run.aborted is not None:
            self._ended_aborts[ref.key] = run.aborted
            if len(self._ended_aborts) > self._max_runs:
                self._ended_aborts.popitem(last=False)
        await self._quiet(run.end())

    async def end_all(self) -> None:
        """End every run the gate holds (the host went away)."""
        for run in list(self._runs.values()):
            await self.end(run.ref)

    def aborted(self, ref: RunRef) -> Any:
        """The run's abort verdict, also after the run ended; None if it was not aborted."""
        ended = self._ended_aborts.get(ref.key)
        if ended is not None:
            return ended
        run = self._runs.get(ref.key)
        return run.aborted if run is not None else None

    # decisions between "before the tool" and "after the tool" hooks (frameworks that split them)

    def hold(self, key: str, call_id: str, decision: Decision) -> None:
        """Keep a call's decision until its outcome, per run: runs may number their call ids alike."""
        self._pending[(key, call_id)] = decision
        if len(self._pending) > self._max_pending:
            self._pending.popitem(last=False)

    def take(self, key: str, call_id: str) -> Decision | None:
        return self._pending.pop((key, call_id), None)

    async def _quiet(self, awaitable: Any) -> None:
        try:
            await awaitable
        except Exception:  # noqa: BLE001 - publishing must never break the agent
            self.client.stats.send_errors += 1
