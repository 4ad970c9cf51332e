"""The one entry point: ``step(state, event, config) -> StepResult``.

It plays OpenClaw's caller (§9) for one event of one run: detection before a
call is recorded, critical calls blocked and not recorded (their results are
the veto), warnings emitted by the bucket rule, outcomes recorded and fed to
the post-compaction guard. With ``ext.profile`` (``openclaw-latest``) the same
caller applies OpenClaw's newest rules instead (:mod:`loopwarden.detection.latest`,
RULES.md §14): one branch per event, the rest of the path untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from msgspec import UNSET

from loopwarden.detection import cost, latest
from loopwarden.detection import guard as guards
from loopwarden.detection.buckets import dedup_key, should_emit
from loopwarden.detection.cost import Charge
from loopwarden.detection.detectors import Finding, decide
from loopwarden.detection.history import record_outcome
from loopwarden.detection.latest_hashing import KIND_NONE, KIND_VETO, LATEST_HASHER, VETO, CallInfo, mutation_target
from loopwarden.detection.payloads import HASHER, CallKey, ResultKey
from loopwarden.detection.state import MAX_BLOCKED_CALLS, RunState, RunUsage, expect_veto
from loopwarden.detection.tools import normalize_tool_name
from loopwarden.schemas.config import ResolvedConfig
from loopwarden.schemas.events import CompactionRetry, Event, RunEnd, ToolCall, ToolResult, VerdictAck
from loopwarden.schemas.extensions import Extensions
from loopwarden.schemas.verdicts import Detection

_EMPTY_PARAMS = b"{}"

NO_DETECTIONS: tuple[Detection, ...] = ()


class StepResult(NamedTuple):
    state: RunState | None  # None: the run's state can be dropped (run_end)
    detections: Sequence[Detection]  # in order; `emitted` says which are published
    duplicate: bool = False  # a repeated event_id: nothing was applied
    guard_armed: bool = False  # a compaction_retry armed the guard
    charge: Charge | None = None  # usage this event added to a loop (runs whose calls carry usage)


# Memo hits probed here without a method call (the key as HASHER.result_key makes it: its result_tools
# are exec alone); misses go through HASHER (which never replaces these dicts).
_known_calls = HASHER.calls.entries.get
_known_results = HASHER.results.entries.get
_new = tuple.__new__  # StepResult's generated __new__ is Python code, run once per event


def _detection(state: RunState, event: ToolCall, tool: str, finding: Finding, ext: Extensions | None) -> Detection:
    """A finding as the caller reports it: critical blocks (unless shadowed), warnings by the bucket rule."""
    # Shadow: reported, but the run goes on as if the detector had not fired.
    shadow = ext is not None and ext.shadowed(finding.detector)
    critical = finding.level == "critical"
    if critical:
        if not shadow:  # shadowed: nothing refused, so no veto to expect
            expect_veto(state, event.tool_call_id, MAX_BLOCKED_CALLS)
        emitted = True
    else:
        emitted = should_emit(state.buckets, dedup_key(event.run_id, finding.warning_key), finding.count)
    return Detection(
        level=finding.level,
        detector=finding.detector,
        count=finding.count,
        warning_key=finding.warning_key,
        tool_name=tool,
        message=finding.message,
        emitted=emitted,
        action="block" if critical else "warn",
        paired_tool_name=finding.paired_tool_name,
        shadow=shadow,
        liveness_signal=finding.liveness_signal,
    )


def _charge_recorded(
    u: RunUsage, state: RunState, event: ToolCall, sig: str, tool: str, charge: Charge | None
) -> Charge | None:
    """Usage bookkeeping once the call is recorded; the charge the event adds."""
    if charge is not None:  # this call's usage is in the detection's charge
        cost.align(u, state.history, True)
        return charge
    tokens, spent = cost.of_call(u, event.usage)
    charge = cost.charge_blocked(u, sig, tool, tokens, spent) if u.blocked else None
    if charge is None:
        cost.align(u, state.history, True, tokens, spent)
    else:
        cost.align(u, state.history, True)
    return charge


def _on_call(state: RunState, event: ToolCall, cfg: ResolvedConfig, ext: Extensions | None) -> StepResult:
    tool = normalize_tool_name(event.tool_name)
    raw = _EMPTY_PARAMS if event.params is UNSET else bytes(event.params)
    info = _known_calls(CallKey(tool, raw)) or HASHER.call_info(tool, raw)
    sig = info.sig
    detections = NO_DETECTIONS
    u = state.usage
    if u is None and event.usage is not None:
        u = cost.start(state)
    charge = None
    if cfg.enabled:
        finding = decide(state.history, tool, sig, info.known_poll, cfg)
        if finding is not None:
            detection = _detection(state, event, tool, finding, ext)
            detections = (detection,)
            if u is not None:
                charge = cost.charge(u, state.history, detection, sig, *cost.of_call(u, event.usage))
            if detection.action == "block" and not detection.shadow:
                return _new(StepResult, (state, detections, False, False, charge))  # §9.3: not executed, not recorded
    if cfg.record_calls:
        state.history.push(tool, sig, event.tool_call_id, None, None, cfg.history_size)  # record_call, inlined
        if u is not None:
            charge = _charge_recorded(u, state, event, sig, tool, charge)
    return _new(StepResult, (state, detections, False, False, charge))


def _vetoed(state: RunState, call_id: str | None) -> bool:
    """§13.3: the result of a call the engine blocked is the veto, whatever payload arrived."""
    if call_id:
        if call_id in state.blocked:
            state.blocked.remove(call_id)
            return True
    elif state.blocked_without_id:
        state.blocked_without_id -= 1  # an id-less blocked call's result, matched by order
        return True
    return False


def _observe(
    state: RunState, tool: str, sig: str, result_hash: str, window: int, ext: Extensions | None
) -> StepResult | None:
    """Feed the armed guard (§10.3); the abort, if any."""
    abort = guards.observe(state.guard, tool, sig, result_hash, window)
    if abort is None:
        return None
    if ext is not None and ext.shadowed(abort.detector):
        abort.shadow = True  # reported; the run is not aborted
    u = state.usage
    charge = None if u is None else cost.charge(u, state.history, abort, sig, result_hash=result_hash)
    return StepResult(state, (abort,), False, False, charge)


def _on_result(state: RunState, event: ToolResult, cfg: ResolvedConfig, ext: Extensions | None) -> StepResult:
    call_id = event.tool_call_id
    if (state.blocked or state.blocked_without_id) and _vetoed(state, call_id):
        return _new(StepResult, (state, NO_DETECTIONS, False, False, None))
    tool = normalize_tool_name(event.tool_name)
    raw = _EMPTY_PARAMS if event.params is UNSET else bytes(event.params)
    info = _known_calls(CallKey(tool, raw)) or HASHER.call_info(tool, raw)
    error = None if event.error is UNSET else bytes(event.error)
    if error is None or error == b"null":
        result = event.result
        if result is UNSET:
            return _new(StepResult, (state, NO_DETECTIONS, False, False, None))
        body = bytes(result)
        known = _known_results(ResultKey("exec" if tool == "exec" else "", info.mode, body)) or HASHER.outcome(
            tool, info.mode, body, None
        )
    else:
        known = HASHER.outcome(tool, info.mode, None, error)
    result_hash, unknown = known.result_hash, known.unknown
    if result_hash is None:
        return _new(StepResult, (state, NO_DETECTIONS, False, False, None))
    sig = info.sig
    appended = record_outcome(state.history, tool, sig, call_id, result_hash, unknown, cfg.history_size)
    u = state.usage
    if u is not None:
        cost.align(u, state.history, appended)
    if cfg.guard_enabled and state.guard.remaining > 0:  # an unarmed guard observes nothing (§10.3)
        abort = _observe(state, tool, sig, result_hash, cfg.guard_window, ext)
        if abort is not None:
            return abort
    return _new(StepResult, (state, NO_DETECTIONS, False, False, None))


# --- the openclaw-latest profile (loopwarden.detection.latest): the same caller, the newest rules ---


def _judged(tool: str, raw: bytes, info: CallInfo) -> tuple[str, CallInfo]:
    """The name and call a call is judged under (RULES.md L1.4): its own, but ``tool`` for a blank name."""
    if tool:
        return tool, info
    return "tool", LATEST_HASHER.call_info("tool", raw)


def _on_call_latest(state: RunState, event: ToolCall, cfg: ResolvedConfig, ext: Extensions) -> StepResult:
    tool = normalize_tool_name(event.tool_name)
    raw = _EMPTY_PARAMS if event.params is UNSET else bytes(event.params)
    info = LATEST_HASHER.call_info(tool, raw)
    sig = info.sig
    target = mutation_target(info.path, event.cwd) if ext.write_churn else None  # the release has no write churn
    h = state.history
    x = latest.extras(state)
    detections = NO_DETECTIONS
    u = state.usage
    if u is None and event.usage is not None:
        u = cost.start(state)
    charge = None
    if cfg.enabled:
        judged, seen = _judged(tool, raw, info)
        finding = latest.decide(h, x, judged, seen.sig, seen.known_poll, target)
        if finding is not None:
            detection = _detection(state, event, judged, finding, ext)
            detections = (detection,)
            if u is not None:
                charge = cost.charge(u, h, detection, sig, *cost.of_call(u, event.usage))
            if detection.action == "block" and not detection.shadow:
                # Not executed, not recorded: the veto is recorded now, before any later call is examined
                # (the release records it only for a call whose own key is the judged one: not a blank name).
                appended = tool == judged and latest.record_outcome(h, x, tool, sig, event.tool_call_id, VETO, target)
                if u is not None:
                    cost.align(u, h, appended)
                return _new(StepResult, (state, detections, False, False, charge))
    if cfg.enabled:  # the release records a call only when `enabled === true` (its outcome is recorded anyway)
        latest.record_call(h, x, tool, sig, event.tool_call_id, target)
        if u is not None:
            charge = _charge_recorded(u, state, event, sig, tool, charge)
    return _new(StepResult, (state, detections, False, False, charge))


def outcome_hash(event: ToolResult, ext: Extensions | None = None) -> str | None:
    """The result hash a tool result is recorded with (the hashers' memo makes a repeat cheap).

    For the fleet side, which keys its failure fingerprints by it (``RunState.prints``);
    ``_on_result``/``_on_result_latest`` compute the same inline on the hot path."""
    tool = normalize_tool_name(event.tool_name)
    raw = _EMPTY_PARAMS if event.params is UNSET else bytes(event.params)
    error = None if event.error is UNSET else bytes(event.error)
    if error == b"null":
        error = None
    body = None if error is not None or event.result is UNSET else bytes(event.result)
    if error is None and body is None:
        return None
    if ext is not None and ext.profile:
        return LATEST_HASHER.outcome(tool, LATEST_HASHER.call_info(tool, raw).mode, body, error).result_hash
    return HASHER.outcome(tool, HASHER.call_info(tool, raw).mode, body, error).result_hash


def _on_result_latest(state: RunState, event: ToolResult, cfg: ResolvedConfig, ext: Extensions) -> StepResult:
    call_id = event.tool_call_id
    if (state.blocked or state.blocked_without_id) and _vetoed(state, call_id):  # recorded when blocked
        return _new(StepResult, (state, NO_DETECTIONS, False, False, None))
    tool = normalize_tool_name(event.tool_name)
    raw = _EMPTY_PARAMS if event.params is UNSET else bytes(event.params)
    info = LATEST_HASHER.call_info(tool, raw)
    error = None if event.error is UNSET else bytes(event.error)
    if error is None or error == b"null":
        result = event.result
        if result is UNSET:
            return _new(StepResult, (state, NO_DETECTIONS, False, False, None))
        outcome = LATEST_HASHER.outcome(tool, info.mode, bytes(result), None)
    else:
        outcome = LATEST_HASHER.outcome(tool, info.mode, None, error)
    result_hash = outcome.result_hash
    if result_hash is None and outcome.kind == KIND_NONE:
        return _new(StepResult, (state, NO_DETECTIONS, False, False, None))
    sig = info.sig
    h = state.history
    target = mutation_target(info.path) if ext.write_churn else None
    appended = latest.record_outcome(h, latest.extras(state), tool, sig, call_id, outcome, target)
    u = state.usage
    if u is not None:
        cost.align(u, h, appended)
    # Only hashed records reach the guard: a veto never does.
    if result_hash is not None and cfg.guard_enabled and state.guard.remaining > 0:
        abort = _observe(state, tool, sig, result_hash, latest.GUARD_WINDOW, ext)
        if abort is not None:
            return abort
    return _new(StepResult, (state, NO_DETECTIONS, False, False, None))


# --- bounded recovery's batch admission (openclaw-latest; the runner's side, RULES.md L9) ---


def _call_key(event: ToolCall) -> tuple[str, str, str | None]:
    tool = normalize_tool_name(event.tool_name)
    raw = _EMPTY_PARAMS if event.params is UNSET else bytes(event.params)
    info = LATEST_HASHER.call_info(tool, raw)
    return tool, info.sig, info.path


def action_key(event: ToolCall) -> tuple[str, str]:
    """The tool and signature a call is judged under (the release's ``actionKey``; a blank name is ``tool``)."""
    tool, sig, _ = _call_key(event)
    if tool:
        return tool, sig
    raw = _EMPTY_PARAMS if event.params is UNSET else bytes(event.params)
    return "tool", LATEST_HASHER.call_info("tool", raw).sig


def open_batch(state: RunState, calls: int) -> None:
    """Start a batch's projection (on a copy of the run's state): the window grows by the batch."""
    latest.project(state.history, calls - 1)


def as_sibling_veto(state: RunState, event: ToolCall) -> None:
    """In a batch's projection: the call just admitted counts as a loop veto for the siblings after it.

    Marks its pending record (the newest, if it is this call's) as a veto, keeping its call id."""
    h, x = state.history, latest.extras(state)
    if h.args and h.results[-1] is None and x.kinds[-1] == KIND_NONE and h.call_ids[-1] == event.tool_call_id:
        x.kinds[-1] = KIND_VETO


def commit_batch(state: RunState, call_ids: Sequence[str]) -> None:
    """The admitted batch's records become the pending calls they are (undo :func:`as_sibling_veto`),
    and the window is 30 again."""
    ids = set(call_ids)
    h, x = state.history, latest.extras(state)
    for j in range(len(h.args) - 1, max(-1, len(h.args) - 1 - len(ids)), -1):
        if h.call_ids[j] in ids and h.results[j] is None and x.kinds[j] == KIND_VETO:
            x.kinds[j] = KIND_NONE
    latest.end_projection(h, x)


def refuse_batch(state: RunState, calls: Sequence[ToolCall], trigger: ToolCall, ext: Extensions) -> None:
    """A critical refused the whole batch before any call ran: the loop's veto is recorded for every call
    with the trigger's tool and signature, nothing for the others, and each call's result is its veto."""
    key = action_key(trigger)
    h, x = state.history, latest.extras(state)
    for call in calls:
        tool, sig, path = _call_key(call)
        if (tool, sig) == key:
            target = mutation_target(path, call.cwd) if ext.write_churn else None
            latest.record_outcome(h, x, tool, sig, call.tool_call_id, VETO, target)
        expect_veto(state, call.tool_call_id, MAX_BLOCKED_CALLS)


def step(state: RunState | None, event: Event, config: ResolvedConfig, *, ext: Extensions | None = None) -> StepResult:
    """Apply one event of one run. ``state`` is mutated in place and returned.

    ``ext`` is the agent's ``loopwarden`` block (``FleetConfig.extensions``);
    without it (or with its defaults) the verdicts are OpenClaw's.
    """
    cls = type(event)
    if cls is not ToolCall and cls is not ToolResult:  # the two common types skip these tests
        if isinstance(event, RunEnd):
            return StepResult(None, NO_DETECTIONS)
        if isinstance(event, VerdictAck):  # about a verdict, not the agent's work: no rule sees it
            return StepResult(state, NO_DETECTIONS)
    if state is None:
        state = RunState()
    event_id = event.event_id
    if event_id and not state.first_sight(event_id):
        return StepResult(state, NO_DETECTIONS, duplicate=True)
    if ext is not None and ext.profile:  # the openclaw-latest profile (the only one)
        if type(event) is ToolCall:  # type(), not cls: the checker narrows the event's type on it
            return _on_call_latest(state, event, config, ext)
        if type(event) is ToolResult:
            return _on_result_latest(state, event, config, ext)
        window = latest.GUARD_WINDOW
    else:
        if state.extras is not None:  # the profile's columns, once it ran: they would go out of step
            state.extras = None
        if type(event) is ToolCall:  # type(), not cls: the checker narrows the event's type on it
            return _on_call(state, event, config, ext)
        if type(event) is ToolResult:
            return _on_result(state, event, config, ext)
        window = config.guard_window
    if isinstance(event, CompactionRetry):
        if config.guard_enabled:
            guards.arm(state.guard, window)
            return StepResult(state, NO_DETECTIONS, guard_armed=True)
        return _new(StepResult, (state, NO_DETECTIONS, False, False, None))
    raise TypeError(f"not an event: {type(event).__name__}")
