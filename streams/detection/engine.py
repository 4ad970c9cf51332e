"""The one entry point: ``step(state, event, config) -> StepResult``.

It plays OpenClaw's caller (§9) for one event of one run: detection before a
call is recorded, critical calls blocked and not recorded (their results are
the veto), warnings emitted by the bucket rule, outcomes recorded and fed to
the post-compaction guard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from msgspec import UNSET

from schemas.config import ResolvedConfig
from schemas.events import CompactionRetry, Event, RunEnd, ToolCall, ToolResult, VerdictAck
from schemas.verdicts import Detection
from streams.detection import guard as guards
from streams.detection.buckets import dedup_key, should_emit
from streams.detection.detectors import decide
from streams.detection.history import record_call, record_outcome
from streams.detection.payloads import HASHER
from streams.detection.state import MAX_BLOCKED_CALLS, MAX_SEEN_EVENT_IDS, RunState
from streams.detection.tools import normalize_tool_name

_EMPTY_PARAMS = b"{}"

NO_DETECTIONS: tuple[Detection, ...] = ()


class StepResult(NamedTuple):
    state: RunState | None  # None: the run's state can be dropped (run_end)
    detections: Sequence[Detection]  # in order; `emitted` says which are published
    duplicate: bool = False  # a repeated event_id: nothing was applied
    guard_armed: bool = False  # a compaction_retry armed the guard


def _on_call(state: RunState, event: ToolCall, cfg: ResolvedConfig) -> Sequence[Detection]:
    tool = normalize_tool_name(event.tool_name)
    info = HASHER.call_info(tool, _EMPTY_PARAMS if event.params is UNSET else bytes(event.params))
    sig = info.sig
    detections = NO_DETECTIONS
    if cfg.enabled:
        finding = decide(state.history, tool, sig, info.known_poll, cfg)
        if finding is not None:
            critical = finding.level == "critical"
            if critical:
                if event.tool_call_id:
                    blocked = state.blocked
                    blocked.append(event.tool_call_id)
                    if len(blocked) > MAX_BLOCKED_CALLS:
                        del blocked[0]
                        state.blocked_overflow += 1
                else:
                    state.blocked_without_id += 1  # matched by order: the next id-less result
                emitted = True
            else:
                emitted = should_emit(state.buckets, dedup_key(event.run_id, finding.warning_key), finding.count)
            detections = (
                Detection(
                    level=finding.level,
                    detector=finding.detector,
                    count=finding.count,
                    warning_key=finding.warning_key,
                    tool_name=tool,
                    message=finding.message,
                    emitted=emitted,
                    action="block" if critical else "warn",
                    paired_tool_name=finding.paired_tool_name,
                ),
            )
            if critical:
                return detections  # §9.3: not executed, not recorded
    if cfg.record_calls:
        record_call(state.history, tool, sig, event.tool_call_id, cfg.history_size)
    return detections


def _on_result(state: RunState, event: ToolResult, cfg: ResolvedConfig) -> Sequence[Detection]:
    call_id = event.tool_call_id
    if call_id:
        if call_id in state.blocked:
            state.blocked.remove(call_id)  # §13.3: the veto, whatever payload arrived
            return NO_DETECTIONS
    elif state.blocked_without_id:
        state.blocked_without_id -= 1  # §13.3: an id-less blocked call's result, matched by order
        return NO_DETECTIONS
    tool = normalize_tool_name(event.tool_name)
    info = HASHER.call_info(tool, _EMPTY_PARAMS if event.params is UNSET else bytes(event.params))
    result = None if event.result is UNSET else bytes(event.result)
    error = None if event.error is UNSET else bytes(event.error)
    if error == b"null":
        error = None
    result_hash, unknown = HASHER.outcome(tool, info.mode, result, error)
    if result_hash is None:
        return NO_DETECTIONS
    sig = info.sig
    record_outcome(state.history, tool, sig, call_id, result_hash, unknown, cfg.history_size)
    if cfg.guard_enabled:
        abort = guards.observe(state.guard, tool, sig, result_hash, cfg.guard_window)
        if abort is not None:
            return (abort,)
    return NO_DETECTIONS


def step(state: RunState | None, event: Event, config: ResolvedConfig) -> StepResult:
    """Apply one event of one run. ``state`` is mutated in place and returned."""
    if isinstance(event, RunEnd):
        return StepResult(None, NO_DETECTIONS)
    if isinstance(event, VerdictAck):  # about a verdict, not the agent's work: no rule sees it
        return StepResult(state, NO_DETECTIONS)
    if state is None:
        state = RunState()
    event_id = event.event_id
    if event_id:
        seen = state.seen
        if event_id in seen:
            return StepResult(state, NO_DETECTIONS, duplicate=True)
        seen.append(event_id)
        if len(seen) > MAX_SEEN_EVENT_IDS:
            del seen[0]
    if isinstance(event, ToolCall):
        return StepResult(state, _on_call(state, event, config))
    if isinstance(event, ToolResult):
        return StepResult(state, _on_result(state, event, config))
    if isinstance(event, CompactionRetry):
        if config.guard_enabled:
            guards.arm(state.guard, config.guard_window)
            return StepResult(state, NO_DETECTIONS, guard_armed=True)
        return StepResult(state, NO_DETECTIONS)
    raise TypeError(f"not an event: {type(event).__name__}")
