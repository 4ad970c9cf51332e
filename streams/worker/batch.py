"""Apply one batch of consumed records: the pure half of the worker's batch path.

:func:`apply_batch` screens and decodes each record, reads its run's value
once per batch, skips events at or below the value's applied offset (a
replay after a crash or rebalance), runs ``step()`` and builds what must be
published (verdicts, dead letters) and what must be stored (one new value
per touched run). It performs no I/O beyond the ``read`` callback it is
given, so every rule of the batch path is unit-tested in-process; the order
in which these effects reach Kafka and RocksDB is the committer's job
(:mod:`loopwarden.worker.committer`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import msgspec

from loopwarden.detection import enforcement, step
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import EVENT_TYPES, EventDecodeError, RunEnd, ToolCall, VerdictAck, run_key
from loopwarden.schemas.verdicts import Detection, Verdict, VerdictViolation, encode_verdict
from loopwarden.worker import audit
from loopwarden.worker.runcodec import RunValue, state_key
from loopwarden.worker.screening import dead_letter_value, screen

log = logging.getLogger(__name__)

_TAGS = {cls: cls.__struct_config__.tag for cls in EVENT_TYPES}


class Record(Protocol):
    """What the batch path needs of one consumed record (a Faust/aiokafka message or a test double)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """The settings the pure batch step depends on."""

    control_topic: str = "agent.loop-control"
    shadow_topic: str = "agent.loop-shadow"  # shadowed detections (loopwarden.shadow): recorded, not enforced
    dead_letter_topic: str = "loopwarden.dead-letter"
    max_event_bytes: int = 1_048_576
    max_depth: int = 64
    ack_timeout: float = 5.0  # seconds a verdict may await its verdict_ack


class Outgoing(msgspec.Struct, frozen=True):
    """One record to publish: a verdict or a dead letter, with what is needed to report a failure."""

    topic: str
    key: bytes | None
    value: bytes
    source: str  # "topic:partition:offset" of the record it answers
    event_ts: float | None = None  # for event->verdict latency (verdicts only)


class Counts(msgspec.Struct, kw_only=True):
    """What one batch did, for the metrics (added to the counters once the batch is durable)."""

    types: Counter = msgspec.field(default_factory=Counter)
    dead: Counter = msgspec.field(default_factory=Counter)
    detections: Counter = msgspec.field(default_factory=Counter)  # (detector, level, tool label, mode)
    verdicts: Counter = msgspec.field(default_factory=Counter)  # (action, detector, mode)
    loop_tokens: Counter = msgspec.field(default_factory=Counter)  # (detector, tool label, mode) -> tokens
    loop_cost: Counter = msgspec.field(default_factory=Counter)  # likewise, for charges that carry a cost
    misrouted: int = 0
    duplicates: int = 0
    guard_arms: int = 0
    guard_aborts: int = 0
    step_seconds: list = msgspec.field(default_factory=list)  # a sample of step() durations
    acks: Counter = msgspec.field(default_factory=Counter)  # outcome
    ack_seconds: list = msgspec.field(default_factory=list)  # verdict -> ack, acks that matched an awaited verdict
    unacked: Counter = msgspec.field(default_factory=Counter)  # action: deadline passed (or the run ended)
    violations: Counter = msgspec.field(default_factory=Counter)  # kind
    runner_decisions: Counter = msgspec.field(default_factory=Counter)  # (agent label, agreement)


class BatchResult(msgspec.Struct, kw_only=True):
    """Everything one batch must make durable: publish ``outgoing``, then store ``writes``."""

    outgoing: list[Outgoing]
    writes: dict[tuple[int, bytes], RunValue | None]  # (partition, table key) -> new value
    positions: dict[int, int]  # partition -> last offset seen
    counts: Counts
    records: int = 0  # records in the batch (the consumer holds them until the batch is durable)


ReadFn = Callable[[int, bytes], "RunValue | None"]  # (partition, table key) -> value before this batch
# (state, event, fleet config) -> StepResult: step() with the agent's settings; a hook for the fleet response
StepFn = Callable[[Any, Any, FleetConfig], Any]
# (state before, event, step result) -> [(topic, key, value)]: extra records to publish before the state
AfterStepFn = Callable[[Any, Any, Any], list]


def default_step(state: Any, event: Any, fleet: FleetConfig) -> Any:
    return step(state, event, fleet.resolve(event.agent_id), ext=fleet.extensions_of(event))


def verdict_for(det: Detection, event: Any, verdict_id: str, now: float) -> Verdict:
    """The published form of an emitted detection."""
    return Verdict(
        verdict_id=verdict_id,
        action=det.action,
        agent_id=event.agent_id,
        run_id=event.run_id,
        session_id=event.session_id,
        level=det.level,
        detector=det.detector,
        count=det.count,
        message=det.message,
        warning_key=det.warning_key,
        tool_name=det.tool_name,
        paired_tool_name=det.paired_tool_name,
        tool_call_id=getattr(event, "tool_call_id", None),
        event_ts=event.ts,
        ts=now,
        shadow=det.shadow,
        loop_tokens=det.loop_tokens,
        loop_cost=det.loop_cost,
        origin=event.origin,
        liveness_signal=det.liveness_signal,
    )


def violation_for(found: enforcement.Violation, event: Any, violation_id: str, now: float) -> VerdictViolation:
    """The published form of a violation (:mod:`loopwarden.detection.enforcement`)."""
    return VerdictViolation(
        violation_id=violation_id,
        kind=found.kind,
        verdict_id=found.verdict_id,
        agent_id=event.agent_id,
        run_id=event.run_id,
        session_id=event.session_id,
        tool_name=getattr(event, "tool_name", None),
        tool_call_id=getattr(event, "tool_call_id", None),
        event_ts=event.ts,
        ts=now,
    )


def _enforce(
    event: Any,
    before: RunValue | None,
    found: enforcement.Violation | None,
    state: Any,
    published: list,
    source: str,
    rkey: bytes,
    now: float,
    fleet: FleetConfig,
    limits: Limits,
    counts: Counts,
    outgoing: list,
    index: int,
) -> int:
    """Acks, deadlines, violations and escalation for one applied event; returns verdicts added.

    ``published`` are the event's enforced verdicts; ``index`` numbers the next verdict id of the event.
    """
    if isinstance(event, VerdictAck):
        counts.acks[event.outcome] += 1
        latency = enforcement.acked(state, event.verdict_id, now)
        if latency is not None:
            counts.ack_seconds.append(latency)
    elif isinstance(event, RunEnd) and before is not None:
        for action in enforcement.unacked_at_end(before.state):
            counts.unacked[action] += 1
        return 0
    for action in enforcement.overdue(state, now, limits.ack_timeout):
        counts.unacked[action] += 1
    if found is not None:
        counts.violations[found.kind] += 1
        outgoing.append(
            Outgoing(
                limits.control_topic,
                rkey,
                encode_verdict(violation_for(found, event, f"{source}:violation", now)),
                source,
            )
        )
    if not published and found is None and (state is None or state.enforcement is None):
        return 0  # nothing to note: runs without verdicts pay nothing more

    def next_id() -> str:
        nonlocal index
        index += 1
        return f"{source}:{index - 1}"

    extra = enforcement.after_step(
        state, event, found, published, next_id, now, fleet.extensions(event.agent_id).escalation
    )
    for verdict_id, det in extra:
        counts.verdicts[(det.action, det.detector, "enforce")] += 1
        outgoing.append(
            Outgoing(
                limits.control_topic, rkey, encode_verdict(verdict_for(det, event, verdict_id, now)), source, event.ts
            )
        )
    return len(extra)


def allow_for(event: ToolCall, verdict_id: str, now: float) -> Verdict:
    """The answer to a gated call (``await_decision``) that no detector stopped."""
    return Verdict(
        verdict_id=verdict_id,
        action="allow",
        agent_id=event.agent_id,
        run_id=event.run_id,
        session_id=event.session_id,
        tool_name=event.tool_name,
        tool_call_id=event.tool_call_id,
        event_ts=event.ts,
        ts=now,
    )


class StepSampler:
    """Times ``step()`` for one event in ``every`` (counted in ``n``): the histogram is a sample,
    the clock calls are not free. One per worker, so the count runs on across batches: a fresh
    one per batch would time nothing in batches under ``every`` events (low traffic)."""

    __slots__ = ("n", "every")

    def __init__(self, every: int = 8) -> None:
        self.n = 0
        self.every = every


def apply_batch(
    records: Iterable[Record],
    read: ReadFn,
    fleet: FleetConfig,
    limits: Limits,
    tool_label: Callable[[str | None], str] = lambda name: "other",
    now: float | None = None,
    sampler: StepSampler | None = None,
    stepper: StepFn = default_step,
    after_step: AfterStepFn | None = None,
) -> BatchResult:
    """Apply ``records`` in order; nothing is published or stored here (see the module docstring)."""
    now = time.time() if now is None else now
    sampler = sampler or StepSampler()
    perf = time.perf_counter
    counts = Counts()
    outgoing: list[Outgoing] = []
    values: dict[tuple[int, bytes], RunValue | None] = {}  # this batch's view of each touched run
    writes: dict[tuple[int, bytes], RunValue | None] = {}
    positions: dict[int, int] = {}
    # (agent, session, run, origin) -> (Kafka key, table key, config, extensions): all four derive from
    # those (one fleet config per batch), so they are worked out once per run per batch, not per event.
    keys: dict[tuple[str, str | None, str | None, str | None], tuple[bytes, bytes, Any, Any]] = {}
    plain = stepper is default_step  # no fleet hooks: step() with the memoized settings, one call less
    control, shadow_topic = limits.control_topic, limits.shadow_topic
    max_bytes, max_depth = limits.max_event_bytes, limits.max_depth
    types = counts.types
    violation = enforcement.violation
    tick, every = sampler.n, sampler.every
    n = 0

    for n, msg in enumerate(records, 1):  # noqa: B007 (n is read after the loop)
        topic, partition, offset, key, raw = msg.topic, msg.partition, msg.offset, msg.key, msg.value
        positions[partition] = offset
        try:
            event = screen(raw, max_bytes, max_depth)
        except EventDecodeError as exc:
            counts.dead[exc.reason] += 1
            outgoing.append(
                Outgoing(
                    limits.dead_letter_topic,
                    key,
                    dead_letter_value(exc, topic, partition, offset, raw),
                    f"{topic}:{partition}:{offset}",
                )
            )
            continue
        cls = type(event)
        types[_TAGS[cls]] += 1
        ids = (event.agent_id, event.session_id, event.run_id, event.origin)
        known = keys.get(ids)
        if known is None:
            known = keys[ids] = (
                run_key(event).encode(),
                state_key(event),
                fleet.resolve(event.agent_id),
                fleet.extensions_of(event),  # an observed origin (spans): every detection shadowed
            )
        rkey = known[0]
        if key is not None and key != rkey:
            counts.misrouted += 1
        slot = (partition, known[1])
        if slot in values:
            value = values[slot]
        else:
            value = values[slot] = read(*slot)
        if value is not None and offset <= value.offset:
            counts.duplicates += 1  # applied before a crash or rebalance: its verdicts were delivered then
            continue
        tick += 1
        timed = not tick % every
        t0 = perf() if timed else 0.0
        try:
            state_in = value.state if value is not None else None
            found = violation(state_in, event)
            if plain:
                result = step(state_in, event, known[2], ext=known[3])
            else:
                result = stepper(state_in, event, fleet)
        except Exception as exc:  # an engine bug must not stop the fleet's stream
            source = f"{topic}:{partition}:{offset}"
            log.exception("step() failed at %s", source)
            err = EventDecodeError("engine_error", f"{type(exc).__name__}: {exc}")
            counts.dead[err.reason] += 1
            outgoing.append(
                Outgoing(limits.dead_letter_topic, key, dead_letter_value(err, topic, partition, offset, raw), source)
            )
            continue
        if timed:
            counts.step_seconds.append(perf() - t0)
        values[slot] = writes[slot] = RunValue(offset, now, result.state)
        if result.duplicate:
            counts.duplicates += 1
            continue
        if result.guard_armed:
            counts.guard_arms += 1
        charge = result.charge
        if charge is not None:  # set also on steps without detections (calls to a blocked signature)
            labels = (charge.detector, tool_label(charge.tool_name), "shadow" if charge.shadow else "enforce")
            counts.loop_tokens[labels] += charge.tokens
            if charge.cost is not None:
                counts.loop_cost[labels] += charge.cost
        gated = cls is ToolCall and event.await_decision
        decided = event.decision if cls is ToolCall else None  # the runner decided this call itself
        if decided is not None and not result.detections:  # agreed or not, counted once per decided call
            counts.runner_decisions[audit.label(decided, (), fleet, event.agent_id)] += 1
        extra = after_step(state_in, event, result) if after_step is not None else ()
        if not (
            result.detections
            or gated
            or extra
            or found is not None
            or cls is VerdictAck
            or (state_in is not None and state_in.enforcement is not None)
        ):  # acks, obedience: watched
            continue  # the common case: nothing to publish for this event
        source = f"{topic}:{partition}:{offset}"  # built only for what is published: it names the verdict
        for topic_, key_, value_ in extra:
            outgoing.append(Outgoing(topic_, key_, value_, source))
        index = 0  # verdict ids are numbered per event across both topics, so they never collide
        published: list[tuple[str, Detection]] = []  # enforced: acks, obedience and escalation follow them
        for det in result.detections:
            mode = "shadow" if det.shadow else "enforce"
            counts.detections[(det.detector, det.level, tool_label(det.tool_name), mode)] += 1
            if not det.emitted:
                continue
            verdict_id = f"{source}:{index}"
            index += 1
            if det.shadow:  # the run goes on as without loopwarden: nothing on the control topic
                counts.verdicts[(det.action, det.detector, mode)] += 1
                verdict = verdict_for(det, event, verdict_id, now)
                outgoing.append(Outgoing(shadow_topic, rkey, encode_verdict(verdict), source, event.ts))
                continue
            published.append((verdict_id, det))
        to_publish = published
        if decided is not None and result.detections:  # only what the runner could not know
            audited = audit.audit(decided, published)
            counts.runner_decisions[audit.label(decided, published, fleet, event.agent_id)] += 1
            to_publish, published = audited.publish, audited.notes
        for verdict_id, det in to_publish:
            counts.verdicts[(det.action, det.detector, "enforce")] += 1
            if det.detector == "compaction_loop_persisted":
                counts.guard_aborts += 1
            verdict = verdict_for(det, event, verdict_id, now)
            outgoing.append(Outgoing(control, rkey, encode_verdict(verdict), source, event.ts))
        enforced = len(published) + _enforce(
            event, value, found, result.state, published, source, rkey, now, fleet, limits, counts, outgoing, index
        )
        if enforced == 0 and gated:  # shadowed detections only: the runner is answered as if none fired
            counts.verdicts[("allow", "none", "enforce")] += 1
            outgoing.append(
                Outgoing(control, rkey, encode_verdict(allow_for(event, f"{source}:{index}", now)), source, event.ts)
            )
    sampler.n = tick
    return BatchResult(outgoing=outgoing, writes=writes, positions=positions, counts=counts, records=n)
