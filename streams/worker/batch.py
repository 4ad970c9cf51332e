"""Apply one batch of consumed records: the pure half of the worker's batch path.

:func:`apply_batch` screens and decodes each record, reads its run's value
once per batch, skips events at or below the value's applied offset (a
replay after a crash or rebalance), has each event decided by
:func:`~loopwarden.detection.decision.decide_event` (the decision replay and
tune make too) and builds what must be published (verdicts named by their
record, violations, dead letters) and what must be stored (one new value per
touched run), counting it all for the metrics. It performs no I/O beyond the ``read`` callback it is
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

from loopwarden.detection.decision import EventDecision, decide_event
from loopwarden.detection.incident_block import IncidentBoard
from loopwarden.detection.published import verdict_for, violation_for
from loopwarden.kafka.records import unreadable
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import EVENT_TYPES, MISROUTED, Event, EventDecodeError, ToolCall, VerdictAck, run_key
from loopwarden.schemas.verdicts import Verdict, encode_verdict
from loopwarden.worker import audit
from loopwarden.worker.runcodec import RunValue, adopt_legacy, state_key
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
    misrouted_dead_letter: bool = True  # an event keyed other than by its run key: dead letter (else applied)
    hash_key: bytes | None = None  # HMAC secret of the hashes in published warning keys (None: as computed)


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
# (state before, event, decision) -> [(topic, key, value)]: extra records to publish before the state
AfterStepFn = Callable[[Any, Any, Any], list]


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


def record_source(msg: Record) -> str:
    """``topic:partition:offset``: names the record a verdict answers (the prefix of its verdict ids)."""
    return f"{msg.topic}:{msg.partition}:{msg.offset}"


# The run of an event, worked out once per run per batch (one fleet config per batch): its Kafka key,
# table key, resolved config and extensions, under (agent, session, run, origin).
RunKeys = tuple[bytes, bytes, Any, Any]
Slot = tuple[int, bytes]  # (partition, table key)
APPLIED = object()  # read_run's answer for an event applied before (not None: a new run's state is None)


class _Batch:
    """One batch's working state and its steps, in the order :func:`apply_batch` calls them.

    A step that drops a record returns None, after counting it (and dead-lettering it through
    :meth:`dead_letter`, the one place a dead letter is built).
    """

    __slots__ = (
        "read",
        "fleet",
        "limits",
        "tool_label",
        "now",
        "board",
        "after_step",
        "sampler",
        "max_bytes",
        "max_depth",
        "ack_timeout",
        "counts",
        "outgoing",
        "values",
        "writes",
        "positions",
        "keys",
    )

    def __init__(
        self,
        read: ReadFn,
        fleet: FleetConfig,
        limits: Limits,
        tool_label: Callable[[str | None], str],
        now: float,
        sampler: StepSampler,
        board: IncidentBoard | None,
        after_step: AfterStepFn | None,
    ) -> None:
        self.read, self.fleet, self.limits, self.tool_label = read, fleet, limits, tool_label
        self.now, self.sampler, self.board, self.after_step = now, sampler, board, after_step
        self.max_bytes, self.max_depth, self.ack_timeout = limits.max_event_bytes, limits.max_depth, limits.ack_timeout
        self.counts = Counts()
        self.outgoing: list[Outgoing] = []
        self.values: dict[Slot, RunValue | None] = {}  # this batch's view of each touched run
        self.writes: dict[Slot, RunValue | None] = {}
        self.positions: dict[int, int] = {}
        self.keys: dict[tuple[str, str | None, str | None, str | None], RunKeys] = {}

    def dead_letter(self, msg: Record, error: EventDecodeError) -> None:
        """Count ``msg`` by the reason it was refused and publish it, keyed by its own key, to the dead letters."""
        self.counts.dead[error.reason] += 1
        topic, partition, offset = msg.topic, msg.partition, msg.offset
        value = dead_letter_value(error, topic, partition, offset, msg.value)
        self.outgoing.append(Outgoing(self.limits.dead_letter_topic, msg.key, value, f"{topic}:{partition}:{offset}"))

    def screen(self, msg: Record) -> Event | None:
        """1. The record's event, bounded in size and depth and decoded; a dead letter if it is none
        (reason ``unreadable`` for the mark of a record aiokafka could not parse)."""
        try:
            event = screen(msg.value, self.max_bytes, self.max_depth)
        except EventDecodeError as exc:
            if exc.reason == "empty" and (why := unreadable(msg.key, msg.value, getattr(msg, "headers", None))):
                exc = EventDecodeError("unreadable", why)  # the mark of a record aiokafka could not parse
            self.dead_letter(msg, exc)
            return None
        self.counts.types[_TAGS[type(event)]] += 1
        return event

    def key(self, msg: Record, event: Event) -> RunKeys | None:
        """2. The event's run keys; a record keyed other than by its run key is counted (and dead-lettered)."""
        ids = (event.agent_id, event.session_id, event.run_id, event.origin)
        known = self.keys.get(ids)
        if known is None:
            fleet = self.fleet
            known = self.keys[ids] = (
                run_key(event).encode(),
                state_key(event),
                fleet.resolve(event.agent_id),
                fleet.extensions_of(event),  # an observed origin (spans): every detection shadowed
            )
        key = msg.key
        if key is not None and key != known[0]:
            self.counts.misrouted += 1
            if self.limits.misrouted_dead_letter:  # its run's other events may be on another partition
                rkey = known[0]
                self.dead_letter(
                    msg, EventDecodeError(MISROUTED, f"record key {key[:200]!r} is not the run key {rkey[:200]!r}")
                )
                return None
        return known

    def read_run(self, msg: Record, event: Event, slot: Slot) -> Any:
        """3. The run's state before this event (its value read once per batch; None for a new run), or
        :data:`APPLIED` for an event at or below the value's offset (a replay after a crash or
        rebalance: its verdicts were delivered then)."""
        values = self.values
        if slot in values:
            value = values[slot]
        else:
            value = values[slot] = self.read(*slot)
            if value is None:  # a run stored by a worker from before the agent id was in the key
                value = values[slot] = adopt_legacy(self.read, msg.partition, event, slot, self.writes)
        if value is None:
            return None
        if msg.offset <= value.offset:
            self.counts.duplicates += 1
            return APPLIED
        return value.state

    def decide(self, msg: Record, event: Event, known: RunKeys, slot: Slot, state_in: Any) -> EventDecision | None:
        """4. The event decided, its run's new value kept for the batch (``step()`` timed for a sample);
        an engine error is dead-lettered, an event the run has seen counted: both None."""
        sampler = self.sampler
        sampler.n += 1
        timed = not sampler.n % sampler.every
        t0 = time.perf_counter() if timed else 0.0
        try:
            # positional: this runs once per event (state, event, config, ext, now, origin, name_origin,
            # ack_timeout, board)
            d = decide_event(
                state_in, event, known[2], known[3], self.now, msg, record_source, self.ack_timeout, self.board
            )
        except Exception as exc:  # an engine bug must not stop the fleet's stream
            log.exception("step() failed at %s", record_source(msg))
            self.dead_letter(msg, EventDecodeError("engine_error", f"{type(exc).__name__}: {exc}"))
            return None
        if timed:
            self.counts.step_seconds.append(time.perf_counter() - t0)
        self.values[slot] = self.writes[slot] = RunValue(msg.offset, self.now, d.state)
        if d.duplicate:
            self.counts.duplicates += 1
            return None
        return d

    def publish(self, msg: Record, event: Event, rkey: bytes, state_in: Any, d: EventDecision) -> None:
        """5. What the decision publishes (verdicts named by their record, violations, escalations, the
        ``allow`` of a gated call, records of ``after_step``), counted for the metrics."""
        counts, outgoing, tool_label = self.counts, self.outgoing, self.tool_label
        if d.guard_armed:
            counts.guard_arms += 1
        charge = d.charge
        if charge is not None:  # set also on steps without detections (calls to a blocked signature)
            labels = (charge.detector, tool_label(charge.tool_name), "shadow" if charge.shadow else "enforce")
            counts.loop_tokens[labels] += charge.tokens
            if charge.cost is not None:
                counts.loop_cost[labels] += charge.cost
        if self.after_step is not None:
            src = record_source(msg)
            for topic, key, value in self.after_step(state_in, event, d):
                outgoing.append(Outgoing(topic, key, value, src))
        if d.agreement is not None:  # a call the runner decided itself: counted once, agreed or not
            counts.runner_decisions[audit.label(self.fleet, event.agent_id, d.agreement)] += 1
        source = d.source  # set when the event decided a verdict or an allow
        cls = type(event)
        if source is None and d.violation is None and not d.detections and not d.unacked and cls is not VerdictAck:
            return  # the common case: nothing to publish or count for this event
        for det in d.detections:
            mode = "shadow" if det.shadow else "enforce"
            counts.detections[(det.detector, det.level, tool_label(det.tool_name), mode)] += 1
        if cls is VerdictAck:
            counts.acks[event.outcome] += 1
            if d.acked:
                counts.ack_seconds.append(d.ack_seconds)
        for action in d.unacked:
            counts.unacked[action] += 1
        limits, now = self.limits, self.now
        control = limits.control_topic
        for v in d.verdicts:  # shadowed: the run goes on as without loopwarden, nothing on the control topic
            if not v.published:  # the runner decided it itself: no duplicate on the control topic
                continue
            det = v.detection
            mode = "enforce" if v.enforced else "shadow"
            counts.verdicts[(det.action, det.detector, mode)] += 1
            if v.enforced and det.detector == "compaction_loop_persisted":
                counts.guard_aborts += 1
            verdict = verdict_for(det, event, f"{source}:{v.n}", now, limits.hash_key)
            topic = control if v.enforced else limits.shadow_topic
            outgoing.append(Outgoing(topic, rkey, encode_verdict(verdict), source, event.ts))
        found = d.violation
        if found is not None:
            src = record_source(msg)
            counts.violations[found.kind] += 1
            outgoing.append(
                Outgoing(control, rkey, encode_verdict(violation_for(found, event, f"{src}:violation", now)), src)
            )
        for v in d.escalations:
            det = v.detection
            counts.verdicts[(det.action, det.detector, "enforce")] += 1
            verdict = verdict_for(det, event, f"{source}:{v.n}", now, limits.hash_key)
            outgoing.append(Outgoing(control, rkey, encode_verdict(verdict), source, event.ts))
        if d.allow is not None:
            counts.verdicts[("allow", "none", "enforce")] += 1
            outgoing.append(
                Outgoing(control, rkey, encode_verdict(allow_for(event, f"{source}:{d.allow}", now)), source, event.ts)
            )


def apply_batch(
    records: Iterable[Record],
    read: ReadFn,
    fleet: FleetConfig,
    limits: Limits,
    tool_label: Callable[[str | None], str] = lambda name: "other",
    now: float | None = None,
    sampler: StepSampler | None = None,
    board: IncidentBoard | None = None,
    after_step: AfterStepFn | None = None,
) -> BatchResult:
    """Apply ``records`` in order; nothing is published or stored here (see the module docstring).

    For each record, in order:

    1. **screen**: bound its size and depth and decode its event (else: dead letter);
    2. **key**: its run's keys, config and extensions (else, keyed otherwise: dead letter);
    3. **read the run**: its value before the event, once per batch (an event at or below the
       value's offset was applied before: skipped);
    4. **decide**: :func:`~loopwarden.detection.decision.decide_event` (an engine error: dead letter);
    5. **publish**: name, encode and count what it decided.

    ``board``: the open incidents (fleet response).
    """
    batch = _Batch(
        read,
        fleet,
        limits,
        tool_label,
        time.time() if now is None else now,
        sampler or StepSampler(),
        board,
        after_step,
    )
    screen_, key, read_run, decide, publish = batch.screen, batch.key, batch.read_run, batch.decide, batch.publish
    positions = batch.positions
    n = 0
    for n, msg in enumerate(records, 1):  # noqa: B007 (n is read after the loop)
        positions[msg.partition] = msg.offset
        if (event := screen_(msg)) is None:
            continue
        if (known := key(msg, event)) is None:
            continue
        slot = (msg.partition, known[1])
        if (state_in := read_run(msg, event, slot)) is APPLIED:
            continue
        if (d := decide(msg, event, known, slot, state_in)) is None:
            continue
        publish(msg, event, known[0], state_in, d)
    return BatchResult(
        outgoing=batch.outgoing, writes=batch.writes, positions=positions, counts=batch.counts, records=n
    )
