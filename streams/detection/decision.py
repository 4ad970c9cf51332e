"""Everything one event decides, in one pure function: :func:`decide_event`.

The worker's batch path, ``loopwarden replay`` and ``loopwarden tune`` (and a
runner deciding in-process) call it per event and repeat none of it; what
each still does itself is naming (verdict ids), publishing, counting and
printing. Around :func:`~loopwarden.detection.engine.step` (or the fleet
response's :func:`~loopwarden.detection.incident_block.fleet_step` while an incident
board is given) it decides:

- the violation the event commits, judged on the state *before* the step;
- which emitted detections are enforced and which shadowed (``loopwarden.shadow``):
  only enforced verdicts await acks, count towards escalation or make later
  calls violations; a shadowed one changes nothing for the run;
- the verdicts to publish, numbered per event: an ordinal ``n`` that a caller
  turns into a verdict id (the worker ``<topic>:<partition>:<offset>:<n>``,
  replay ``<event_index>:<n>``) with the ``name_origin(origin)`` prefix it passes;
- escalation aborts (``loopwarden.escalation``), numbered after them;
- the ``allow`` answer of a gated call that no enforced verdict answers;
- acks matched, verdicts gone unacknowledged (deadline passed, or the run ended);
- the loop-cost charge and the run's new state.

No Faust, no Kafka, no clock: time is the ``now`` given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from loopwarden.detection import enforcement
from loopwarden.detection.audit import Agreement, audit
from loopwarden.detection.cost import Charge
from loopwarden.detection.engine import NO_DETECTIONS, step
from loopwarden.detection.incident_block import IncidentBoard, fleet_step
from loopwarden.detection.state import RunState
from loopwarden.schemas.config import ResolvedConfig
from loopwarden.schemas.events import Event, RunEnd, ToolCall, VerdictAck
from loopwarden.schemas.extensions import OBSERVED_ORIGINS, Extensions
from loopwarden.schemas.verdicts import Detection

ACK_TIMEOUT = 5.0  # seconds a verdict may await its verdict_ack (the worker's --ack-timeout default)


class Numbered(msgspec.Struct, frozen=True, gc=False):
    """A verdict to publish: its ordinal within the event and what it says."""

    n: int
    detection: Detection
    enforced: bool  # False: shadowed (recorded on the shadow topic, the run goes on as without it)
    published: bool = True  # False: the runner decided this call itself and knew it (detection.audit)


class EventDecision(msgspec.Struct, gc=False):
    """What one event decides (see the module docstring); empty parts are empty, never absent."""

    state: RunState | None  # the run's new state; None: drop it (run_end)
    detections: Sequence[Detection] = NO_DETECTIONS  # all of step()'s, in order, emitted or not
    verdicts: Sequence[Numbered] = ()  # the emitted detections, enforced and shadowed, in order
    escalations: Sequence[Numbered] = ()  # escalation aborts, numbered after ``verdicts``
    allow: int | None = None  # ordinal of the `allow` answering a gated call no enforced verdict answers
    violation: enforcement.Violation | None = None  # the verdict this event disobeys
    acked: bool = False  # a verdict_ack that matched a verdict awaiting it
    ack_seconds: float = 0.0  # ... that long after the verdict was published
    unacked: Sequence[str] = ()  # actions of verdicts that will never be acked (deadline passed, run ended)
    charge: Charge | None = None  # usage this event added to a loop
    duplicate: bool = False  # a repeated event_id: nothing applied, nothing decided
    guard_armed: bool = False  # a compaction_retry armed the post-compaction guard
    source: str | None = None  # the verdict-id prefix, when this decision needed one
    agreement: Agreement | None = None  # a call the runner decided itself: how the runner's decision compares

    def verdict_id(self, n: int) -> str:
        return f"{self.source}:{n}"


def decide_event(
    state: RunState | None,
    event: Event,
    config: ResolvedConfig,
    ext: Extensions,
    now: float,
    origin: Any = None,
    name_origin: Callable[[Any], str] = str,
    ack_timeout: float = ACK_TIMEOUT,
    board: IncidentBoard | None = None,
) -> EventDecision:
    """Decide ``event`` of the run whose state is ``state`` (mutated in place, as by ``step()``).

    ``config``/``ext``: the agent's resolved settings and ``loopwarden`` block. ``board``: the
    open incidents (the fleet response applies while it holds any). Verdict ids are
    ``f"{name_origin(origin)}:{n}"``; the prefix is built only when a verdict needs an id.
    """
    found = enforcement.violation(state, event)  # before step(), which forgets a blocked call's id
    watched_only = event.origin in OBSERVED_ORIGINS  # spans: never a violation, an escalation or an allow
    if watched_only:
        found = None
    result = fleet_step(state, event, config, ext, board) if board else step(state, event, config, ext=ext)
    new = result.state
    detections = result.detections
    if result.duplicate:
        return EventDecision(new, duplicate=True)
    cls = type(event)
    gated = False
    decided = None  # the runner's own decision of this call (local-first runners)
    if type(event) is ToolCall and not watched_only:  # type(): the checker narrows on it
        gated, decided = event.await_decision, event.decision
    watched = state is not None and state.enforcement is not None  # acks, obedience and deadlines
    if not (detections or gated or found is not None or watched or cls is VerdictAck):
        agreed = None if decided is None else audit(decided, ()).agreement
        if detections or result.charge is not None or result.guard_armed or agreed is not None:
            return EventDecision(
                new, detections, charge=result.charge, guard_armed=result.guard_armed, agreement=agreed
            )
        return EventDecision(new)  # the usual event: nothing decided beyond the new state
    verdicts: Sequence[Numbered] = ()
    published: Sequence[tuple[str, Detection]] = ()  # enforced: acks, obedience and escalation follow them
    source = None
    n = 0
    if detections:
        verdicts, published = [], []
        for det in detections:
            if det.emitted:
                if source is None:
                    source = name_origin(origin)
                enforced = not det.shadow
                verdicts.append(Numbered(n, det, enforced))
                if enforced:
                    published.append((f"{source}:{n}", det))
                n += 1
    agreed = None
    if decided is not None:  # publish only what the runner could not know; note the runner's ids
        audited = audit(decided, published)
        agreed = audited.agreement
        if verdicts:
            shown = {vid for vid, _ in audited.publish}
            verdicts = [
                v if not v.enforced or f"{source}:{v.n}" in shown else Numbered(v.n, v.detection, True, False)
                for v in verdicts
            ]
        published = audited.notes
    acked, ack_seconds = False, 0.0
    unacked: Sequence[str] = ()
    escalations: Sequence[Numbered] = ()
    if type(event) is VerdictAck:
        latency = enforcement.acked(new, event.verdict_id, now)
        if latency is not None:
            acked, ack_seconds = True, latency
    if cls is RunEnd:
        unacked = enforcement.unacked_at_end(state)
    else:
        unacked = enforcement.overdue(new, now, ack_timeout)
        if not watched_only and (published or found is not None or (new is not None and new.enforcement is not None)):
            first = n

            def next_id() -> str:
                nonlocal n, source
                if source is None:
                    source = name_origin(origin)
                n += 1
                return f"{source}:{n - 1}"

            extra = enforcement.after_step(new, event, found, published, next_id, now, ext.escalation)
            if extra:
                escalations = [Numbered(first + i, det, True) for i, (_, det) in enumerate(extra)]
    allow = None
    if gated and not published and not escalations:  # shadowed detections only: answered as if none fired
        allow = n
    if allow is not None and source is None:
        source = name_origin(origin)
    return EventDecision(
        new,
        detections,
        verdicts,
        escalations,
        allow,
        found,
        acked,
        ack_seconds,
        unacked,
        result.charge,
        False,
        result.guard_armed,
        source,
        agreed,
    )
