"""What the client remembers: per-run state, gate decisions, counters, seen verdict ids.

All of it is plain data touched only from the client's event loop, so no
locks. Memory is bounded: seen ids are an LRU of fixed size, a run's state
lives until the runner closes the run.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Literal

import msgspec

from loopwarden.runner.results import blocked_tool_result
from loopwarden.runner.text import recovery_text, release_warning_note, verdict_text
from loopwarden.schemas.events import ToolCall
from loopwarden.schemas.verdicts import Verdict

DecisionAction = Literal["allow", "warn", "block", "abort"]
DecisionSource = Literal[
    "local", "verdict", "pending_block", "aborted", "batch", "timeout", "error", "offline", "closed"
]
Recovery = Literal["trigger", "sibling"]
_RANK = {"allow": 0, "warn": 1, "block": 2, "abort": 3}
MAX_DECIDED = 256  # a run's recent local decisions, by call id (to recognise the worker repeating one)
MAX_CALLS = 4096  # a run's recent call ids and tool names (verdicts name one of them, or are not this run's)
CLOCK_SLACK = 1.0  # seconds a verdict's event may seem older than the run (a clock step back)
MAX_FIELD = 1024  # characters of a verdict's identifiers and keys (a worker's are at most 512 and a digest)
_FIELDS = ("verdict_id", "agent_id", "session_id", "run_id", "warning_key", "tool_name", "paired_tool_name")
_FIELDS += ("tool_call_id", "origin")


def verdict_fits(verdict: Verdict) -> bool:
    """Whether every identifier of ``verdict`` is of a size a worker writes. What a runner keeps is
    bounded by count (seen ids, warnings, pending verdicts); this bounds each one's bytes too."""
    for name in _FIELDS:
        value = getattr(verdict, name)
        if value is not None and len(value) > MAX_FIELD:
            return False
    return True


class Decision(msgspec.Struct, kw_only=True):
    """The answer of a gate check.

    ``source`` says where it came from: the runner's own ``local`` decision;
    the worker's ``verdict``; the run's remembered ``pending_block`` or
    ``aborted`` state; ``batch``: a sibling refused with its assistant batch
    (bounded recovery, never published as a call); or fail-open ``timeout`` /
    ``error`` / ``offline`` (the broker is away: answered at once) / ``closed``
    (client not started), all with action ``allow``.

    Under the ``openclaw-latest`` profile (``release``) the model-facing text is
    the OpenClaw release's: ``recovery`` says whether the call triggered bounded
    recovery or was refused as its sibling, ``terminal`` that it was the run's
    second critical (the run stops: action ``abort``), and a warning's
    :attr:`note` is the release's system note.
    """

    action: DecisionAction
    source: DecisionSource
    call: ToolCall
    verdict: Verdict | None = None
    seconds: float = 0.0
    superseded: Verdict | None = None  # this call's own block, when the run's abort answered it instead
    release: bool = False  # the openclaw-latest profile: the release's texts
    recovery: Recovery | None = None
    terminal: bool = False

    @property
    def message(self) -> str | None:
        """The text for the model, from the verdict's fields (never the record's own ``message``); the
        tool is named as this runner called it when the verdict answers this very call."""
        verdict = self.verdict
        if self.action == "allow":
            return None  # nothing to tell the model: the call goes on
        reason = None
        if verdict is not None:
            own = verdict.tool_call_id is not None and verdict.tool_call_id == self.call.tool_call_id
            reason = verdict_text(verdict, self.call.tool_name if own else None, self.release)
        if self.recovery is not None:
            return recovery_text(reason, self.recovery == "trigger", self.terminal)
        return reason

    @property
    def note(self) -> str | None:
        """What a warned call's result gets appended (the release's system note under the profile)."""
        if self.action != "warn" or self.verdict is None:
            return None
        return release_warning_note(self.verdict.count) if self.release else self.message

    @property
    def proceed(self) -> bool:
        """Run the tool? True for allow and warn (warnings never stop a call)."""
        return self.action in ("allow", "warn")

    @property
    def failed_open(self) -> bool:
        return self.source in ("timeout", "error", "offline", "closed")

    def blocked_result(self) -> dict:
        """The tool result to give the model instead of running the call (block or abort)."""
        return blocked_tool_result(self.message or "Tool call blocked by loop detection.")


class ClientStats(msgspec.Struct, kw_only=True):
    """Counters a runner can export; all monotonic."""

    events_sent: int = 0
    send_errors: int = 0
    checks: int = 0
    allowed: int = 0
    warned: int = 0
    blocked: int = 0
    aborted: int = 0
    fail_open_timeout: int = 0
    fail_open_error: int = 0
    verdicts_seen: int = 0
    verdicts_delivered: int = 0
    duplicates_dropped: int = 0
    foreign_dropped: int = 0
    undecodable: int = 0
    signature_rejected: int = 0  # control records of this runner's runs dropped: unsigned or forged (verdict_keys)
    callback_errors: int = 0
    encode_fallbacks: int = 0  # payload values sent as their repr (not JSON-encodable)
    acks_sent: int = 0
    start_errors: int = 0  # start() found no broker: the client connects later by itself
    events_dropped: int = 0  # the outbox was full (broker away too long): dropped, never blocking the agent
    events_too_large: int = 0  # events over max_event_bytes: not sent (the worker would dead-letter them)
    events_refused: int = 0  # events the client or broker refused for good (size, topic, ACL): dropped, not retried
    config_rejected: int = 0  # config records not signed by a config key (config_keys): ignored
    disconnects: int = 0  # the producer lost the broker (it reconnects by itself)
    local_decisions: int = 0  # events decided in-process
    local_errors: int = 0  # local decisions that raised (the call was allowed)
    verdicts_agreed: int = 0  # worker verdicts repeating a local decision (dropped)
    verdicts_stale: int = 0  # verdicts for a call the run never made, or from before it began (dropped)
    corrections: int = 0  # worker verdicts stricter than the local decision (applied to the next call)

    @property
    def fail_open(self) -> int:
        return self.fail_open_timeout + self.fail_open_error

    def count(self, action: str) -> None:
        """One answered check, by the action it answered."""
        if action == "block":
            self.blocked += 1
        elif action == "warn":
            self.warned += 1
        elif action == "abort":
            self.aborted += 1
        else:
            self.allowed += 1


class RunState:
    """What a runner needs to act on one run's verdicts that no gate consumed.

    - ``pending_block``: the last ``block`` verdict for a call that already
      ran (not gated, or its gate timed out): the run's *next* call is
      refused with its message, then it is cleared;
    - ``aborted``: the ``abort`` verdict (``compaction_loop_persisted``): the
      runner ends the run; every later check answers ``abort``;
    - ``warnings``: ``warn`` verdicts not yet shown to the model (bounded);
    - ``recovered``: under the profile, the run already had its one critical
      (bounded recovery); a new run starts without.

    Runs are keyed by session when they have no ``run_id``, so a verdict of an
    earlier run of the same session (an old signed ``abort`` written again)
    carries this run's key. ``started`` and the run's own call ids (bounded)
    tell them apart: :meth:`owns` accepts a verdict only for a call this run
    made, and only from an event of this run's lifetime.
    """

    __slots__ = (
        "pending_block",
        "aborted",
        "warnings",
        "abort_acked",
        "recovered",
        "started",
        "last_tool",
        "_decided",
        "_calls",
    )

    def __init__(self, started: float | None = None) -> None:
        self.started = time.time() if started is None else started  # the events' clock (wire ``ts``)
        self.last_tool: str | None = None
        self._calls: OrderedDict[str, str] = OrderedDict()  # call id -> tool name, as this run sent them
        self.recovered = False  # bounded recovery: the run's first critical was answered (the next one stops it)
        self.pending_block: Verdict | None = None
        self.aborted: Verdict | None = None
        self.warnings: deque[Verdict] = deque(maxlen=64)
        self.abort_acked = False  # the abort is acknowledged once, however many checks it answers
        self._decided: OrderedDict[str, str] | None = None  # call id -> local action (local mode only)

    def made(self, call_id: str, tool_name: str) -> None:
        """Remember a call this run sent (bounded: the oldest are forgotten)."""
        calls = self._calls
        calls[call_id] = tool_name
        calls.move_to_end(call_id)
        if len(calls) > MAX_CALLS:
            calls.popitem(last=False)
        self.last_tool = tool_name

    def tool_of(self, call_id: str | None) -> str | None:
        """The tool name this run sent with ``call_id`` (None: not one of its calls)."""
        return self._calls.get(call_id) if call_id else None

    def owns(self, verdict: Verdict) -> bool:
        """Whether ``verdict`` is about this run: its event is not older than the run, and the call it
        names (if any) is one this run made."""
        ts = verdict.event_ts
        if ts is not None and ts < self.started - CLOCK_SLACK:
            return False
        if verdict.tool_call_id is not None:
            return verdict.tool_call_id in self._calls
        return ts is not None  # no call named: only its event's time ties it to this run

    def decided(self, call_id: str, action: str) -> None:
        """Remember the runner's own decision for a call (bounded)."""
        if self._decided is None:
            self._decided = OrderedDict()
        self._decided[call_id] = action
        if len(self._decided) > MAX_DECIDED:
            self._decided.popitem(last=False)

    def covers(self, verdict: Verdict) -> bool:
        """Whether the runner already decided at least as strictly as the worker's ``verdict``."""
        if verdict.action == "abort" and self.aborted is not None:
            return True
        own = self._decided.get(verdict.tool_call_id) if self._decided and verdict.tool_call_id else None
        return own is not None and _RANK[own] >= _RANK.get(verdict.action, 0)

    def apply(self, verdict: Verdict) -> None:
        if verdict.action == "block":
            self.pending_block = verdict
        elif verdict.action == "abort":
            if self.aborted is None:  # only the first abort of a run matters (§10.4)
                self.aborted = verdict
        elif verdict.action == "warn":
            self.warnings.append(verdict)

    def take_block(self) -> Verdict | None:
        verdict, self.pending_block = self.pending_block, None
        return verdict

    def take_warnings(self) -> list[Verdict]:
        out = list(self.warnings)
        self.warnings.clear()
        return out


class RecentIds:
    """A bounded set of verdict ids (LRU): ``seen(id)`` is True for a repeat."""

    __slots__ = ("_ids", "_max")

    def __init__(self, maxsize: int) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._max = max(1, maxsize)

    def seen(self, verdict_id: str) -> bool:
        ids = self._ids
        if verdict_id in ids:
            ids.move_to_end(verdict_id)
            return True
        ids[verdict_id] = None
        if len(ids) > self._max:
            ids.popitem(last=False)
        return False

    def __len__(self) -> int:
        return len(self._ids)
