"""Whether a run obeys its verdicts: acks awaited, violations noticed, escalation.

Beside the rules, never inside them: :func:`loopwarden.detection.step` and its
verdicts are the same with or without this module.
:func:`loopwarden.detection.decision.decide_event` (the decision of the worker,
replay and tune) calls it around ``step()``:

- :func:`violation` *before* ``step()`` (which forgets a blocked call id when
  its result arrives) says whether the event disobeys a verdict: the result
  of a blocked call that is not the veto (the tool ran anyway; ``step()``
  still takes it as the veto, so the run's history does not change), or a
  tool call after the run's abort. A *gated* call after the abort (one that
  raced the abort verdict) is judged by its result instead: the runner
  answers it with the abort and reports the veto as its result, which is
  obedience; any other result is the ``call_after_abort``. It reads and
  changes nothing.
- Only enforced verdicts are noted: a shadowed one (``loopwarden.shadow``)
  awaits no ack, counts towards no escalation and makes no later call a
  violation (the run goes on as without it).
- :func:`published` notes each published warn/block/abort verdict (it then
  awaits an ack); :func:`acked` matches a ``verdict_ack``; :func:`overdue`
  takes out verdicts unacknowledged past a deadline (counted once each).
- :func:`count_violation` and :func:`published` return the escalation abort
  (detector ``escalation``) when ``loopwarden.escalation`` asks for one.

All state is in ``RunState.enforcement``, made at a run's first published
verdict, so runs without verdicts carry nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET

from loopwarden.detection import messages
from loopwarden.detection.hashing import is_loop_veto
from loopwarden.detection.state import MAX_AWAITED_ACKS, Awaited, Enforcement, RunState
from loopwarden.schemas.events import ToolCall, ToolResult
from loopwarden.schemas.extensions import Escalation
from loopwarden.schemas.jsvalues import js_loads_slow
from loopwarden.schemas.verdicts import Detection, ViolationKind

AWAITS_ACK = frozenset({"warn", "block", "abort"})  # `allow` needs no ack


class Violation(NamedTuple):
    kind: ViolationKind
    verdict_id: str | None


def _is_veto(event: ToolResult) -> bool:
    if event.error is not UNSET and bytes(event.error) != b"null":
        return False  # the tool threw: it ran
    if event.result is UNSET:
        return True  # no outcome at all: nothing says the tool ran
    raw = bytes(event.result)
    try:
        value: Any = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        try:
            value = js_loads_slow(raw)
        except ValueError:
            return False
    return is_loop_veto(value)


def violation(state: RunState | None, event: Any) -> Violation | None:
    """The verdict ``event`` disobeys, judged on the state before ``step()``; None if it obeys."""
    if state is None:
        return None
    enf = state.enforcement
    if enf is None and not state.blocked and not state.blocked_without_id:
        return None  # no verdict to disobey: the usual run, answered before any type test
    if isinstance(event, ToolCall):
        if enf is not None and enf.abort_id is not None and not _judged_by_result(event):
            return Violation("call_after_abort", enf.abort_id)
        return None
    if isinstance(event, ToolResult):
        call_id = event.tool_call_id
        if call_id:
            if call_id not in state.blocked:
                if enf is not None and call_id in enf.after_abort and not _is_veto(event):
                    return Violation("call_after_abort", enf.abort_id)
                return None
            verdict_id = enf.block_ids.get(call_id) if enf is not None else None
        elif state.blocked_without_id:
            verdict_id = None
        else:
            return None
        if not _is_veto(event):
            return Violation("ran_after_block", verdict_id)
    return None


def _judged_by_result(event: ToolCall) -> bool:
    """A gated call with an id: the runner refuses it once aborted, and its result says whether it did."""
    return bool(event.await_decision and event.tool_call_id)


def forget_block(state: RunState, event: Any) -> None:
    """After ``step()`` took a call's result: its block's verdict id (or its abort watch) is no longer needed."""
    enf = state.enforcement
    if enf is not None and isinstance(event, ToolResult) and event.tool_call_id:
        if enf.block_ids:
            enf.block_ids.pop(event.tool_call_id, None)
        if enf.after_abort and event.tool_call_id in enf.after_abort:
            enf.after_abort.remove(event.tool_call_id)


def _watch_after_abort(enf: Enforcement, event: ToolCall) -> None:
    """Note a gated call asked after the abort: its result is judged (:func:`violation`)."""
    watched = enf.after_abort
    if event.tool_call_id is None:  # the caller watches only calls with an id
        return
    watched.append(event.tool_call_id)
    if len(watched) > MAX_AWAITED_ACKS:
        del watched[0]


def _escalate(enf: Enforcement, tool: str, why: str, count: int) -> Detection:
    enf.escalated = True
    return Detection(
        level="critical",
        detector="escalation",
        count=count,
        warning_key=f"escalation:{why}",
        tool_name=tool,
        emitted=True,
        action="abort",
        message=messages.escalation(count, why),
    )


def _enforcement(state: RunState) -> Enforcement:
    enf = state.enforcement
    if enf is None:
        enf = state.enforcement = Enforcement()
    return enf


def count_violation(state: RunState, found: Violation, esc: Escalation, tool: str) -> Detection | None:
    """Count a violation; the escalation abort when it reaches ``after_violations``."""
    enf = _enforcement(state)
    enf.violations += 1
    if esc.after_violations and not enf.escalated and enf.violations >= esc.after_violations:
        return _escalate(enf, tool, "verdict_violations", enf.violations)
    return None


def published(
    state: RunState, verdict_id: str, action: str, call_id: str | None, now: float, esc: Escalation, tool: str
) -> Detection | None:
    """Note a published verdict; the escalation abort when blocks reach ``after_blocks``."""
    if action not in AWAITS_ACK:
        return None
    enf = _enforcement(state)
    awaited = enf.awaited
    awaited.append(Awaited(verdict_id, action, now))
    if len(awaited) > MAX_AWAITED_ACKS:
        del awaited[0]
        enf.awaited_overflow += 1
    if action == "abort":
        if enf.abort_id is None:
            enf.abort_id = verdict_id
    elif action == "block":
        enf.blocks += 1
        if call_id:
            block_ids = enf.block_ids
            block_ids[call_id] = verdict_id
            if len(block_ids) > MAX_AWAITED_ACKS:
                del block_ids[next(iter(block_ids))]
        if esc.after_blocks and not enf.escalated and enf.blocks >= esc.after_blocks:
            return _escalate(enf, tool, "blocks", enf.blocks)
    return None


def acked(state: RunState | None, verdict_id: str, now: float) -> float | None:
    """Match an ack: seconds since its verdict was published, or None (not awaited: late, repeated, unknown)."""
    enf = state.enforcement if state is not None else None
    if enf is None:
        return None
    for i, item in enumerate(enf.awaited):
        if item.verdict_id == verdict_id:
            del enf.awaited[i]
            return max(0.0, now - item.ts)
    return None


def overdue(state: RunState | None, now: float, timeout: float) -> list[str]:
    """Take out the verdicts awaited longer than ``timeout``; their actions (count each once)."""
    enf = state.enforcement if state is not None else None
    if enf is None or not enf.awaited or now - enf.awaited[0].ts <= timeout:
        return []
    late = [a for a in enf.awaited if now - a.ts > timeout]
    enf.awaited = [a for a in enf.awaited if now - a.ts <= timeout]
    return [a.action for a in late]


def unacked_at_end(state: RunState | None) -> list[str]:
    """A run that ends cannot ack any more: the actions of everything it still owed."""
    enf = state.enforcement if state is not None else None
    return [a.action for a in enf.awaited] if enf is not None else []


def after_step(
    state: RunState | None,
    event: Any,
    found: Violation | None,
    verdicts: Sequence[tuple[str, Detection]],
    next_id: Any,
    now: float,
    esc: Escalation,
) -> list[tuple[str, Detection]]:
    """Everything after ``step()`` published ``verdicts`` (id, detection) for ``event``; ``found`` is
    :func:`violation`'s answer from before it. Returns the escalation aborts to publish too, with
    ids from ``next_id()``. ``verdicts`` are the enforced ones only: a shadowed verdict is noted nowhere."""
    if state is None:
        return []
    enf = state.enforcement
    if enf is not None and enf.abort_id is not None and isinstance(event, ToolCall) and _judged_by_result(event):
        _watch_after_abort(enf, event)  # aborted before this call: its result says whether it ran
    if not verdicts and found is None:  # the usual event of a watched run: nothing published, nothing broken
        forget_block(state, event)
        return []
    tool = getattr(event, "tool_name", None) or ""
    extra: list[tuple[str, Detection]] = []

    def note(verdict_id: str, det: Detection) -> None:
        abort = published(state, verdict_id, det.action, getattr(event, "tool_call_id", None), now, esc, det.tool_name)
        if abort is not None:
            extra_id = next_id()
            extra.append((extra_id, abort))
            note(extra_id, abort)

    for verdict_id, det in verdicts:
        note(verdict_id, det)
    forget_block(state, event)
    if found is not None:
        abort = count_violation(state, found, esc, tool)
        if abort is not None:
            extra_id = next_id()
            extra.append((extra_id, abort))
            note(extra_id, abort)
    return extra
