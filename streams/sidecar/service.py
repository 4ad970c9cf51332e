"""The decision service's logic, without HTTP: a :class:`~loopwarden.runner.LoopClient` and three tables.

Callers in other languages know a host's session and, at best, its tool-call
ids; the service turns that into the runner contract:

- **sessions**: (agent, session) -> the session's current run id. A
  ``run_start`` opens a new run (a new user prompt) and ends the previous one;
  without one, the first request of a session makes its run. Assigned run ids
  are random (run keys are global: a counter would collide after a restart);
- **runs**: run key -> the registered :class:`~loopwarden.runner.Run`; its
  verdicts (the worker's corrections, fleet blocks, an abort) land in its
  state and answer its next check, as in-process;
- **pending**: checks not yet given their result, by (run key, call id), so a
  result acknowledges the block or abort its check answered; a result
  without a call id pairs with the run's oldest pending check of the same tool
  and params (hosts that have no call ids).

Every table is a bounded LRU (counts in ``/v1/health``); what falls out is
counted. All of it is touched only from the event loop: no locks.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from typing import Any

import msgspec
from msgspec import UNSET, Raw

from loopwarden.runner import LoopClient, Run, blocked_tool_result, wire
from loopwarden.runner.state import Decision
from loopwarden.runner.text import verdict_text
from loopwarden.schemas import sidecar as api
from loopwarden.schemas.events import ToolCall


class Limits(msgspec.Struct, kw_only=True, frozen=True):
    """The bounds of the service's tables and request bodies."""

    max_sessions: int = 10_000
    max_runs: int = 10_000
    max_pending: int = 100_000
    max_body: int = 1 << 20  # bytes of one request body (413 beyond)


def new_run_id() -> str:
    return f"run_{uuid.uuid4().hex[:24]}"


class _RunSlot:
    """A run the service drives: its handle and the ids of its pending checks, oldest first."""

    __slots__ = ("run", "pending")

    def __init__(self, run: Run) -> None:
        self.run = run
        self.pending: OrderedDict[str, None] = OrderedDict()


def _same_params(a: Raw | Any, b: Raw | Any) -> bool:
    """Whether two Raw params are the same JSON value (bytes first; then decoded, key order aside)."""
    if a is UNSET or b is UNSET:
        return a is b or _is_empty(a if b is UNSET else b)
    if bytes(a) == bytes(b):
        return True
    try:
        return msgspec.json.decode(a) == msgspec.json.decode(b)
    except msgspec.DecodeError:
        return False


def _is_empty(raw: Raw) -> bool:
    return bytes(raw).strip() in (b"{}", b"null")


class Service:
    """The runner contract over a started :class:`LoopClient` (one per process)."""

    def __init__(self, client: LoopClient, limits: Limits | None = None) -> None:
        self.client = client
        self.limits = limits or Limits()
        self.stats = api.ServiceStats()
        self._sessions: OrderedDict[tuple[str, str | None], str] = OrderedDict()
        self._runs: OrderedDict[str, _RunSlot] = OrderedDict()
        self._pending: OrderedDict[tuple[str, str], Decision] = OrderedDict()

    # -- tables -------------------------------------------------------------------

    def _current(self, agent_id: str, session_id: str | None, create: bool) -> str | None:
        """The session's current run id (made on first use when ``create``)."""
        key = (agent_id, session_id)
        run_id = self._sessions.get(key)
        if run_id is not None:
            self._sessions.move_to_end(key)
            return run_id
        if not create:
            return None
        run_id = self._sessions[key] = new_run_id()
        if len(self._sessions) > self.limits.max_sessions:
            self._sessions.popitem(last=False)
            self.stats.sessions_evicted += 1
        return run_id

    def _ref(self, req: Any, create: bool = True) -> wire.RunRef | None:
        run_id = req.run_id or self._current(req.agent_id, req.session_id, create)
        if run_id is None:
            return None
        return wire.RunRef(agent_id=req.agent_id, session_id=req.session_id, run_id=run_id)

    def _slot(self, ref: wire.RunRef) -> _RunSlot:
        key = ref.key
        slot = self._runs.get(key)
        if slot is not None:
            self._runs.move_to_end(key)
            return slot
        slot = self._runs[key] = _RunSlot(self.client.run(ref.agent_id, ref.session_id, ref.run_id))
        if len(self._runs) > self.limits.max_runs:
            old_key, old = self._runs.popitem(last=False)
            self._drop(old_key, old)
            self.stats.runs_evicted += 1
        return slot

    def _drop(self, key: str, slot: _RunSlot) -> None:
        """Forget a run: its pending checks and its registration with the client (no more verdicts)."""
        for call_id in slot.pending:
            self._pending.pop((key, call_id), None)
        slot.pending.clear()
        self.client.unregister(key)

    def _remember(self, key: str, slot: _RunSlot, decision: Decision) -> None:
        call_id = decision.call.tool_call_id or ""
        self._pending[(key, call_id)] = decision
        slot.pending[call_id] = None
        if len(self._pending) > self.limits.max_pending:
            (old_key, old_id), _ = self._pending.popitem(last=False)
            old = self._runs.get(old_key)
            if old is not None:
                old.pending.pop(old_id, None)
            self.stats.pending_evicted += 1

    def _take(self, key: str, slot: _RunSlot, req: api.ResultRequest) -> Decision | None:
        """The pending check this result answers: by call id, else the oldest of the same tool and params."""
        call_id = req.tool_call_id
        if call_id is None:
            for pending_id in slot.pending:
                d = self._pending.get((key, pending_id))
                if d is not None and d.call.tool_name == req.tool_name and _same_params(d.call.params, req.params):
                    call_id = pending_id
                    break
            if call_id is None:
                return None
        slot.pending.pop(call_id, None)
        return self._pending.pop((key, call_id), None)

    def tables(self) -> api.Tables:
        lim = self.limits
        return api.Tables(
            sessions=len(self._sessions),
            runs=len(self._runs),
            pending=len(self._pending),
            max_sessions=lim.max_sessions,
            max_runs=lim.max_runs,
            max_pending=lim.max_pending,
            max_body=lim.max_body,
        )

    # -- the contract -----------------------------------------------------------------

    async def check(self, req: api.CheckRequest) -> api.CheckResponse:
        ref = self._ref(req)
        assert ref is not None
        slot = self._slot(ref)
        decision = await self.client.check(_call(ref, req))
        return self._answer(ref, slot, decision)

    async def check_batch(self, req: api.CheckBatchRequest) -> api.CheckBatchResponse:
        """One model message's calls, admitted together (``LoopClient.check_batch``)."""
        ref = self._ref(req)
        assert ref is not None
        slot = self._slot(ref)
        decisions = await self.client.check_batch([_call(ref, c) for c in req.calls])
        return api.CheckBatchResponse(decisions=[self._answer(ref, slot, d) for d in decisions])

    def _answer(self, ref: wire.RunRef, slot: _RunSlot, decision: Decision) -> api.CheckResponse:
        """A check's answer; an allowed call also hands over a worker's warning for an earlier call."""
        verdict, source, action = decision.verdict, decision.source, decision.action
        message = decision.message
        if action == "allow" and not decision.failed_open:
            warnings = slot.run.state.warnings
            if warnings:  # a worker's warning for an earlier call (a correction, a cross-run repeat)
                verdict, source, action = warnings.popleft(), "worker_warning", "warn"
                message = verdict_text(verdict)
                self.stats.worker_warnings += 1
                # the call's result hands it back too (hosts that show context only after the call)
                decision = msgspec.structs.replace(decision, action="warn", verdict=verdict)
        self._remember(ref.key, slot, decision)
        return api.CheckResponse(
            action=action,
            proceed=action in ("allow", "warn"),
            detector=verdict.detector if verdict is not None else None,
            count=verdict.count if verdict is not None else None,
            message=message,
            verdict_id=verdict.verdict_id if verdict is not None else None,
            source=source,
            failed_open=decision.failed_open,
            run_id=ref.run_id or "",
            tool_call_id=decision.call.tool_call_id or "",
            level=verdict.level if verdict is not None else None,
            recovery=decision.recovery,
            note=decision.note if decision.release and action == "warn" else None,
        )

    async def result(self, req: api.ResultRequest) -> api.Ok:
        ref = self._ref(req)
        assert ref is not None
        key = ref.key
        slot = self._slot(ref)
        decision = self._take(key, slot, req)
        result: Any = req.result
        if decision is not None:
            if req.blocked:
                result = blocked_tool_result(decision.message or "Tool call blocked by loop detection.")
            elif decision.action in ("block", "abort") and result is not UNSET:
                result = _decoded(result)  # tool_result tells an applied veto from a tool that ran anyway
            await self.client.tool_result(decision, result=result, error=req.error)
            return api.Ok(paired=True, warning=_warning(decision, ref), abort=self._abort(ref))
        self.stats.results_unpaired += 1
        call = ToolCall(
            agent_id=ref.agent_id,
            session_id=ref.session_id,
            run_id=ref.run_id,
            tool_name=req.tool_name,
            tool_call_id=req.tool_call_id,
            params=req.params,
        )
        if req.blocked:
            result = blocked_tool_result("Tool call blocked by loop detection.")
        await self.client.tool_result(call, result=result, error=req.error)
        return api.Ok(paired=False, abort=self._abort(ref))

    def _abort(self, ref: wire.RunRef) -> api.Warning | None:
        """The run's abort, if it has one: the post-compaction guard aborts on a result, and a worker's
        abort may land while a call runs. Hosts that can end a session after a call (Claude Code's
        PostToolUse) do it with this answer instead of waiting for the run's next check."""
        state = self.client.state(ref.key)
        if state is None or state.aborted is None:
            return None
        verdict = state.aborted
        return api.Warning(message=verdict_text(verdict), verdict_id=verdict.verdict_id, run_id=ref.run_id or "")

    async def ack(self, req: api.AckRequest) -> api.Ok:
        ref = self._ref(req)
        assert ref is not None
        state = self.client.state(ref.key)
        if state is not None and state.aborted is not None and state.aborted.verdict_id == req.verdict_id:
            if state.abort_acked:
                return api.Ok()
            state.abort_acked = True
        if await self.client.publish(wire.verdict_ack(ref, req.verdict_id, req.outcome, req.detail)):
            self.client.stats.acks_sent += 1
        return api.Ok()

    async def compaction(self, req: api.CompactionRequest) -> api.Ok:
        ref = self._ref(req)
        assert ref is not None
        self._slot(ref)
        await self.client.compaction_retry(ref, req.reason)
        return api.Ok()

    async def run_start(self, req: api.RunStartRequest) -> api.RunStartResponse:
        key = (req.agent_id, req.session_id)
        previous = self._sessions.get(key)
        run_id = req.run_id or new_run_id()
        ended = None
        if previous is not None and previous != run_id:
            await self._end(wire.RunRef(agent_id=req.agent_id, session_id=req.session_id, run_id=previous))
            ended = previous
        self._sessions.pop(key, None)
        self._sessions[key] = run_id
        if len(self._sessions) > self.limits.max_sessions:
            self._sessions.popitem(last=False)
            self.stats.sessions_evicted += 1
        self._slot(wire.RunRef(agent_id=req.agent_id, session_id=req.session_id, run_id=run_id))
        return api.RunStartResponse(run_id=run_id, ended=ended)

    async def run_end(self, req: api.RunEndRequest) -> api.Ok:
        ref = self._ref(req, create=False)
        if ref is None:
            return api.Ok()
        await self._end(ref)
        if self._sessions.get((req.agent_id, req.session_id)) == ref.run_id:
            del self._sessions[(req.agent_id, req.session_id)]
        return api.Ok()

    async def _end(self, ref: wire.RunRef) -> None:
        """``run_end`` (after acking the run's abort, as :meth:`Run.end` does) and forget the run."""
        key = ref.key
        slot = self._runs.pop(key, None)
        run = slot.run if slot is not None else self.client.run(ref.agent_id, ref.session_id, ref.run_id)
        await run.end()  # unregisters the run
        if slot is not None:
            self._drop(key, slot)

    def health(self) -> api.Health:
        client = self.client
        return api.Health(
            status="ok",
            broker="connected" if client.connected else "offline",
            decisions="local" if client.local else "worker",
            listening=client.listening,
            buffered=client.buffered,
            tables=self.tables(),
        )

    def stats_body(self) -> api.Stats:
        return api.Stats(client=msgspec.structs.asdict(self.client.stats), service=self.stats, tables=self.tables())


def _call(ref: wire.RunRef, req: api.CheckRequest | api.BatchCall) -> ToolCall:
    call = wire.tool_call(ref, req.tool_name, None, tool_call_id=req.tool_call_id)
    return call if req.params is UNSET else msgspec.structs.replace(call, params=req.params)


def _warning(decision: Decision, ref: wire.RunRef) -> api.Warning | None:
    """The warning a paired check answered, handed back with its result (hosts that show the model
    context only after the call; the hook acks it once shown)."""
    if decision.action != "warn" or not decision.message:
        return None
    verdict_id = decision.verdict.verdict_id if decision.verdict is not None else None
    return api.Warning(message=decision.message, verdict_id=verdict_id, run_id=ref.run_id or "")


def _decoded(raw: Raw) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw
