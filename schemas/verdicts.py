"""What loopwarden says: engine detections, published verdicts, dead letters."""

from __future__ import annotations

import hashlib
from typing import Literal

import msgspec

from loopwarden.schemas.jsvalues import json_bytes

Level = Literal["warning", "critical"]
Action = Literal["warn", "block", "abort", "allow"]
DetectorName = Literal[
    "generic_repeat",
    "known_poll_no_progress",
    "ping_pong",
    "unknown_tool_repeat",
    "global_circuit_breaker",
    "compaction_loop_persisted",
    "fleet_incident",  # extension: blocked while an incident of the fleet is open (loopwarden.fleet)
    "cross_run_repeat",  # extension: a session's finished runs repeat the same work (loopwarden.fleet)
    "escalation",  # loopwarden.escalation: a run that ignores its verdicts is aborted
    "argument_churn",  # profile openclaw-latest: one tool cycling through argument variants (warning only)
]
LivenessSignal = Literal["argument_churn"]
ViolationKind = Literal["ran_after_block", "call_after_abort"]


class Detection(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One detector hit on one event, emitted or not (the engine's output)."""

    level: Level
    detector: DetectorName
    count: int
    warning_key: str
    tool_name: str
    message: str
    emitted: bool
    action: Action
    paired_tool_name: str | None = None
    shadow: bool = False  # recorded, not enforced (loopwarden.shadow)
    loop_tokens: int | None = None  # tokens charged to this loop so far (runs whose calls carry usage)
    loop_cost: float | None = None  # likewise for cost, when calls carry one
    # profile openclaw-latest: the run is churning arguments without progress (a runner may
    # feed it to a liveness clock); on argument_churn warnings and on known-poll/ping-pong
    # warnings that won over a churn.
    liveness_signal: LivenessSignal | None = None


class Verdict(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="type", tag="verdict"):
    """A verdict on ``agent.loop-control`` (schemas/WIRE.md, "Verdicts").

    ``verdict_id`` is derived from the triggering event's topic, partition and
    offset, so a re-delivered verdict carries the same id and can be dropped.
    """

    verdict_id: str
    action: Action
    agent_id: str
    run_id: str | None = None
    session_id: str | None = None
    level: Level | None = None
    detector: DetectorName | None = None
    count: int | None = None
    message: str | None = None
    warning_key: str | None = None
    tool_name: str | None = None
    paired_tool_name: str | None = None
    tool_call_id: str | None = None
    event_ts: float | None = None
    ts: float | None = None
    shadow: bool = False  # only on the shadow topic: recorded, not enforced
    loop_tokens: int | None = None
    loop_cost: float | None = None
    origin: str | None = None  # the triggering event's origin ("otel": a run seen through its spans)
    liveness_signal: LivenessSignal | None = None  # see Detection


class VerdictViolation(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="type", tag="verdict_violation"):
    """A run went on past a verdict it should have obeyed; on ``agent.loop-control`` beside verdicts.

    ``ran_after_block``: a blocked call's result is not the veto (the tool ran);
    ``call_after_abort``: the run made a tool call after its abort. ``verdict_id``
    is the verdict disobeyed (absent when unknown, e.g. a block without a call id).
    ``violation_id`` is derived like a verdict's, so re-deliveries can be dropped.
    Runners ignore these records; they are for operators and escalation.
    """

    violation_id: str
    kind: ViolationKind
    agent_id: str
    verdict_id: str | None = None
    run_id: str | None = None
    session_id: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    event_ts: float | None = None
    ts: float | None = None


MAX_DEAD_LETTER_RAW = 4096  # bytes of a refused record kept in its dead letter; ``size`` and ``sha256`` say the rest


class DeadLetter(msgspec.Struct, kw_only=True):
    """A record that was refused: where it was, why, and its first bytes with its size and digest.

    Only a bounded prefix is copied: a compressed batch of large records would otherwise become
    dead letters many times its own size (and as much memory in the reader)."""

    reason: str
    detail: str
    topic: str
    partition: int
    offset: int
    raw: bytes  # the first MAX_DEAD_LETTER_RAW bytes of the record's value
    size: int = 0  # the value's size in bytes
    sha256: str = ""  # hex SHA-256 of the whole value


def dead_letter(reason: str, detail: str, topic: str, partition: int, offset: int, raw: bytes | None) -> DeadLetter:
    """The one way a dead letter is made: ``detail`` cut to 1,000 characters, ``raw`` to its bounded prefix."""
    data = raw or b""
    return DeadLetter(
        reason=reason,
        detail=detail[:1000],
        topic=topic,
        partition=partition,
        offset=offset,
        raw=data[:MAX_DEAD_LETTER_RAW],
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


def encode_verdict(verdict: Verdict | VerdictViolation) -> bytes:
    """A verdict as JSON; lone surrogates (tool names and ids are taken as sent) become ``\\udXXX`` escapes."""
    return json_bytes(verdict)
