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

import hashlib
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec import UNSET, Raw

from loopwarden.runner import LoopClient, Run, blocked_tool_result, wire
from loopwarden.runner.results import as_shown
from loopwarden.runner.state import Decision
from loopwarden.runner.tables import LiveLRU
from loopwarden.runner.text import BLOCKED, verdict_text
from loopwarden.schemas import sidecar as api
from loopwarden.schemas.events import ToolCall
from loopwarden.schemas.verdicts import Verdict


class Limits(msgspec.Struct, kw_only=True, frozen=True):
    """The bounds of the service's tables and request bodies."""

    max_sessions: int = 10_000
    max_runs: int = 10_000
    max_pending: int = 100_000
    max_pending_bytes: int = 32 << 20  # bytes of the pending checks (ids and the params kept)
    max_body: int = 1 << 20  # bytes of one request body (413 beyond)


KEPT_PARAMS = 16 << 10  # a pending check keeps params up to this many bytes; larger ones only as a digest
_ENTRY = 256  # bytes a pending entry costs besides its ids and params (the Decision, the table slots)
_RANK = {"allow": 0, "warn": 1, "block": 2, "abort": 3}


def new_run_id() -> str:
    return f"run_{uuid.uuid4().hex[:24]}"


class _RunSlot:
    """A run the service drives: its handle, the ids of its pending checks (oldest first), the
    strongest verdict it had (``level``, by :data:`_RANK`) and whether its run ended."""

    __slots__ = ("run", "pending", "level", "ended")

    def __init__(self, run: Run) -> None:
        self.run = run
        self.pending: OrderedDict[str, None] = OrderedDict()
        self.level = 0
        self.ended = False

    @property
    def holds_block(self) -> bool:
        """Whether the run had a block and no abort (an abort ends the run: a new prompt is a new run)."""
        return self.level >= _RANK["block"] and self.run.state.aborted is None


class _Pending(msgspec.Struct, kw_only=True):
    """A check waiting for its result. Large params are kept only as ``digest`` (pairing a result
    without a call id needs no more); the result then publishes the params it carries."""

    decision: Decision
    digest: bytes | None = None


def _digest(raw: Raw) -> bytes:
    """A digest of a JSON value, key order and spacing aside (what :func:`_same_params` compares)."""
    try:
        canonical = msgspec.json.encode(msgspec.json.decode(raw), order="sorted")
    except (msgspec.DecodeError, msgspec.EncodeError, RecursionError):
        canonical = bytes(raw)
    return hashlib.sha256(canonical).digest()


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


Session = tuple[str, "str | None"]


class Service:
    """The runner contract over a started :class:`LoopClient` (one per process).

    Runs are keyed by (agent, session, run) as the worker keys them (:attr:`wire.RunRef.ident`).
    Every table is a :class:`~loopwarden.runner.tables.LiveLRU`: a run that had a warning, block or
    abort, its session and its pending checks are the last to go, so no flood of other runs,
    sessions or checks lowers its enforcement (SECURITY.md, "The decision service").
    """

    def __init__(self, client: LoopClient, limits: Limits | None = None) -> None:
        self.client = client
        self.limits = lim = limits or Limits()
        self.stats = api.ServiceStats()
        self._sessions: LiveLRU[Session, str] = LiveLRU(lim.max_sessions)
        self._runs: LiveLRU[wire.Ident, _RunSlot] = LiveLRU(lim.max_runs)
        self._pending: LiveLRU[tuple[wire.Ident, str], _Pending] = LiveLRU(
            lim.max_pending, max_bytes=lim.max_pending_bytes
        )

    # -- tables -------------------------------------------------------------------

    def _current(self, agent_id: str, session_id: str | None, create: bool) -> str | None:
        """The session's current run id (made on first use when ``create``)."""
        key = (agent_id, session_id)
        run_id = self._sessions.get(key)
        if run_id is not None or not create:
            return run_id
        run_id = new_run_id()
        self._point(key, run_id)
        return run_id

    def _point(self, key: Session, run_id: str) -> None:
        """Make ``run_id`` the session's current run."""
        self.stats.sessions_evicted += len(self._sessions.put(key, run_id))

    def _ref(self, req: Any, create: bool = True) -> wire.RunRef | None:
        run_id = req.run_id or self._current(req.agent_id, req.session_id, create)
        if run_id is None:
            return None
        return wire.RunRef(agent_id=req.agent_id, session_id=req.session_id, run_id=run_id)

    def _slot(self, ref: wire.RunRef) -> _RunSlot:
        ident = ref.ident
        slot = self._runs.get(ident)
        if slot is not None:
            slot.ended = False  # resumed: its next run_end is published again
            return slot
        run = self.client.run(ref.agent_id, ref.session_id, ref.run_id, on_verdict=self._on_verdict(ref))
        slot = _RunSlot(run)
        self._evicted_runs(self._runs.put(ident, slot))
        return slot

    def _on_verdict(self, ref: wire.RunRef) -> Callable[[Verdict], None]:
        """Every verdict the client hands the run (its own local ones, the worker's): a warning,
        block or abort makes the run, and the session pointing at it, live."""
        ident, session = ref.ident, (ref.agent_id, ref.session_id)

        def live(verdict: Verdict) -> None:
            slot = self._runs.get(ident, touch=False)
            rank = _RANK.get(verdict.action, 0)
            if slot is None or rank == 0:
                return
            slot.level = max(slot.level, rank)
            self._evicted_runs(self._runs.mark_live(ident))
            if self._sessions.get(session, touch=False) == ref.run_id:
                self.stats.sessions_evicted += len(self._sessions.mark_live(session))

        return live

    def _evicted_runs(self, evicted: list[tuple[wire.Ident, _RunSlot]]) -> None:
        for ident, slot in evicted:
            self._drop(ident, slot)
            self.stats.runs_evicted += 1
            if slot.level:
                self.stats.live_runs_evicted += 1

    def _drop(self, ident: wire.Ident, slot: _RunSlot) -> None:
        """Forget a run: its pending checks and its registration with the client (no more verdicts)."""
        for call_id in slot.pending:
            self._pending.pop((ident, call_id))
        slot.pending.clear()
        self.client.unregister(ident)

    def _remember(self, ident: wire.Ident, slot: _RunSlot, decision: Decision) -> None:
        """Keep a check until its result: its params up to :data:`KEPT_PARAMS`, a digest beyond."""
        call = decision.call
        call_id = call.tool_call_id or ""
        entry = _Pending(decision=decision)
        size = _ENTRY + len(ident[0]) + len(call_id) + len(call.tool_name)
        params = call.params
        if params is not UNSET:
            if len(params) > KEPT_PARAMS:  # kept as a digest: the Raw would keep the whole request body
                entry.digest = _digest(params)
                entry.decision = msgspec.structs.replace(decision, call=msgspec.structs.replace(call, params=UNSET))
            else:  # copied out of the request body by _call
                size += len(params)
        key = (ident, call_id)
        slot.pending[call_id] = None
        evicted = self._pending.put(key, entry, size)
        if decision.action != "allow":
            evicted += self._pending.mark_live(key)
        for (old_ident, old_id), _ in evicted:
            old = self._runs.get(old_ident, touch=False)
            if old is not None:
                old.pending.pop(old_id, None)
            self.stats.pending_evicted += 1

    def _take(self, ident: wire.Ident, slot: _RunSlot, req: api.ResultRequest) -> _Pending | None:
        """The pending check this result answers: by call id, else the oldest of the same tool and params."""
        call_id = req.tool_call_id
        if call_id is None:
            digest = None
            for pending_id in slot.pending:
                p = self._pending.get((ident, pending_id), touch=False)
                if p is None or p.decision.call.tool_name != req.tool_name:
                    continue
                if p.digest is None:
                    same = _same_params(p.decision.call.params, req.params)
                else:
                    if digest is None:
                        digest = _digest(req.params) if req.params is not UNSET else b""
                    same = p.digest == digest
                if same:
                    call_id = pending_id
                    break
            if call_id is None:
                return None
        slot.pending.pop(call_id, None)
        return self._pending.pop((ident, call_id))

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
            live_runs=self._runs.live,
            pending_bytes=self._pending.bytes,
            max_pending_bytes=lim.max_pending_bytes,
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
        self._remember(slot.run.ident, slot, decision)
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
        slot = self._slot(ref)
        pending = self._take(slot.run.ident, slot, req)
        result: Any = _as_outcome(req.result)
        if pending is not None:
            decision = pending.decision
            if decision.call.params is UNSET and req.params is not UNSET:  # kept as a digest: the result's own
                decision = msgspec.structs.replace(
                    decision, call=msgspec.structs.replace(decision.call, params=req.params)
                )
            if req.blocked:
                result = blocked_tool_result(decision.message or BLOCKED)
            elif decision.action in ("block", "abort") and result is not UNSET:
                result = _decoded(result)  # tool_result tells an applied veto from a tool that ran anyway
            await self.client.tool_result(decision, result=result, error=req.error)
            return api.Ok(paired=True, warning=_warning(decision, ref), abort=self._abort(ref, slot.run.ident))
        if req.pending_only:  # read back late, and its check has its outcome already (or none to pair)
            return api.Ok(paired=False)
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
            result = blocked_tool_result(BLOCKED)
        # Not a check of this run waiting for its result: a repeat, a call never checked, or one whose
        # check fell out of the table. Published (the worker records it as OpenClaw records an orphan
        # outcome), never applied to the local decision: whoever has the run's ids cannot feed it
        # outcomes that seem to progress and lift the run's block.
        await self.client.publish(wire.result_for(call, result=result, error=req.error, encode=self.client.encode))
        return api.Ok(paired=False, abort=self._abort(ref, slot.run.ident))

    def _abort(self, ref: wire.RunRef, ident: wire.Ident) -> api.Warning | None:
        """The run's abort, if it has one: the post-compaction guard aborts on a result, and a worker's
        abort may land while a call runs. Hosts that can end a session after a call (Claude Code's
        PostToolUse) do it with this answer instead of waiting for the run's next check."""
        state = self.client.state(ident)
        if state is None or state.aborted is None:
            return None
        verdict = state.aborted
        return api.Warning(message=verdict_text(verdict), verdict_id=verdict.verdict_id, run_id=ref.run_id or "")

    async def ack(self, req: api.AckRequest) -> api.Ok:
        ref = self._ref(req)
        assert ref is not None
        state = self.client.state(ref.ident)
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
        """Open a run (a new prompt): it starts from zero, as a new run does in OpenClaw (RULES.md §11.3).

        The session's previous run ends (its state is kept if it had a verdict: its ids resumed are
        still blocked). While the session's current run holds a block, the session stays on it:
        requests without a run id (hosts that cannot name their runs) keep its history, as OpenClaw
        keeps a session's unscoped calls, so no run_start lifts the block they would meet."""
        key = (req.agent_id, req.session_id)
        previous = self._sessions.get(key)
        run_id = req.run_id or new_run_id()
        ended = None
        if previous is not None and previous != run_id:
            prev = wire.RunRef(agent_id=req.agent_id, session_id=req.session_id, run_id=previous)
            slot = self._runs.get(prev.ident, touch=False)
            holds = slot is not None and slot.holds_block
            if holds and req.run_id is None:
                return api.RunStartResponse(run_id=previous, ended=None)  # the session stays on its run
            await self._end(prev)
            ended = previous
            if not holds:  # requests without a run id stay with the blocked run
                self._point(key, run_id)
        else:
            self._point(key, run_id)
        self._slot(wire.RunRef(agent_id=req.agent_id, session_id=req.session_id, run_id=run_id)).ended = False
        return api.RunStartResponse(run_id=run_id, ended=ended)

    async def run_end(self, req: api.RunEndRequest) -> api.Ok:
        ref = self._ref(req, create=False)
        if ref is None:
            return api.Ok()
        await self._end(ref)
        key = (req.agent_id, req.session_id)
        slot = self._runs.get(ref.ident, touch=False)
        if self._sessions.get(key, touch=False) == ref.run_id and not (slot is not None and slot.holds_block):
            self._sessions.pop(key)  # a run holding a block stays the session's current run
        return api.Ok()

    async def _end(self, ref: wire.RunRef) -> None:
        """``run_end`` (after acking the run's abort, as :meth:`Run.end` does), then forget the run,
        unless it had a warning, block or abort: such a run stays (live, marked ended) with its state
        and its registration, so its ids resumed meet its block or abort again (RULES.md §11.3)."""
        ident = ref.ident
        slot = self._runs.get(ident, touch=False)
        if slot is not None and slot.level:
            aborted = slot.run.state.aborted
            if aborted is not None:
                await self.client._ack_once(aborted, "applied", "abort: run ended")
            if not slot.ended:
                slot.ended = True
                self.stats.runs_kept += 1
                await self.client.run_end(ref)
            return
        self._runs.pop(ident)
        run = slot.run if slot is not None else self.client.run(ref.agent_id, ref.session_id, ref.run_id)
        await run.end()  # unregisters the run
        if slot is not None:
            self._drop(ident, slot)

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
    params = req.params
    if params is UNSET:
        return call
    # a decoded Raw keeps the whole request body alive: small params are copied out of it (large ones
    # only until the check is answered: Service._remember keeps their digest)
    return msgspec.structs.replace(call, params=params.copy() if len(params) <= KEPT_PARAMS else params)


def _warning(decision: Decision, ref: wire.RunRef) -> api.Warning | None:
    """The warning a paired check answered, handed back with its result (hosts that show the model
    context only after the call; the hook acks it once shown)."""
    if decision.action != "warn" or not decision.message:
        return None
    verdict_id = decision.verdict.verdict_id if decision.verdict is not None else None
    return api.Warning(message=decision.message, verdict_id=verdict_id, run_id=ref.run_id or "")


def _as_outcome(raw: Any) -> Any:
    """A caller's result as OpenClaw's rules should see it (``results.as_shown``)."""
    return as_shown(raw) if isinstance(raw, Raw) else raw


def _decoded(raw: Raw) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw
