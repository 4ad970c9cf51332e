"""One batch of input messages -> step() -> verdicts and table writes, idempotently.

Order of effects per batch (crash safety, DESIGN.md; BROKER-NOTES.md §5):

1. each message is screened and decoded (failures -> dead-letter topic),
   its run's value is read once per batch, events at or below the value's
   applied offset are skipped (a replay after a crash), ``step()`` runs;
2. verdicts and dead letters are handed to the producer without waiting;
   each touched run's new value is encoded once (a snapshot) and kept in
   ``pending``, where the next batches read it;
3. a completion task, strictly in batch order, awaits the batch's
   deliveries, only then writes each run once to the table (RocksDB file
   and changelog) with the offset of its last applied event, and only
   then are the batch's messages acked.

The next batch is fetched and processed while one completes (latency and
throughput), but offsets are committed by Faust only for acked messages
(after a producer flush). So a state update that is durable always has its
verdicts durable too; a crash before step 3 replays the events onto the
old state and re-publishes the same verdicts with the same ``verdict_id``
(``topic:partition:offset:index``) for consumers to drop.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections import Counter
from typing import Any, Awaitable, Callable, Iterable

import msgspec

from schemas.events import EVENT_TYPES, EventDecodeError, ToolCall, run_key
from schemas.verdicts import Verdict
from streams.worker.screening import dead_letter_value, screen
from streams.detection import step
from streams.worker.metrics import Metrics
from streams.worker.runcodec import RunValue, decode_value, encode_value, state_key
from streams.worker.runtable import RunTable
from streams.worker.settings import Settings

log = logging.getLogger(__name__)

_verdict_encoder = msgspec.json.Encoder()

_MISSING = object()
_TAGS = {cls: cls.__struct_config__.tag for cls in EVENT_TYPES}

# send(topic, key, value) -> awaitable of the delivery
SendFn = Callable[[str, bytes | None, bytes], Awaitable[Awaitable[Any]]]


class Message(msgspec.Struct, frozen=True):
    """What the processor needs of one consumed record (a Faust message, or a test double)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class RunProcessor:
    def __init__(self, settings: Settings, metrics: Metrics, table: RunTable, send: SendFn,
                 fleet: Callable[[], Any]) -> None:
        self.settings = settings
        self.metrics = metrics
        self.table = table
        self.send = send
        self.fleet = fleet  # () -> current FleetConfig (live overrides swap it)
        self.lock = asyncio.Lock()
        self.positions: dict[int, int] = {}  # partition -> last offset seen (lag)
        self._step_sample = 0
        self.pending: dict[tuple[int, bytes], RunValue | None] = {}  # written by a batch not yet durable
        self._tail: asyncio.Future | None = None  # completion of the latest batch
        self._inflight: collections.deque = collections.deque()
        self.max_inflight = 4
        # Hooks of the fleet extensions (streams.worker.fleet_agent): the step to call, and an
        # async (state_in, event, result) -> [deliveries] run after each applied step.
        self.stepper: Callable[..., Any] = step
        self.after_step: Callable[..., Awaitable[list]] | None = None

    async def process(self, messages: Iterable[Any]) -> "asyncio.Future[None]":
        """Apply a batch; return a future that is done once the batch is durable (then ack it).

        The next batch may be processed before this one is durable: run values
        not yet written stay in ``pending`` (read before the table), and
        completions run strictly in batch order.
        """
        async with self.lock:
            done = await self._process(messages)
        inflight = self._inflight
        inflight.append(done)
        while inflight and inflight[0].done():
            inflight.popleft()
        while len(inflight) > self.max_inflight:  # bound the batches in flight
            await asyncio.shield(inflight[0])
            while inflight and inflight[0].done():
                inflight.popleft()
        return done

    async def drain(self) -> None:
        """Wait until every batch handed in so far is durable."""
        if self._tail is not None:
            await asyncio.shield(self._tail)

    async def _process(self, messages: Iterable[Any]) -> "asyncio.Future[None]":
        s, m = self.settings, self.metrics
        fleet = self.fleet()
        now = time.time()
        slots: dict[tuple[int, bytes], list] = {}  # (partition, key) -> [RunValue | None, dirty]
        deliveries: list[Awaitable[Any]] = []
        published: list[tuple[Verdict, float | None]] = []
        types: Counter = Counter()
        dead: Counter = Counter()
        detections: Counter = Counter()
        verdict_counts: Counter = Counter()
        steps: list[float] = []
        misrouted = duplicates = arms = aborts = 0
        perf = time.perf_counter
        sample = self._step_sample
        pending = self.pending
        stepper, after_step = self.stepper, self.after_step

        for msg in messages:
            topic, partition, offset, key, raw = msg.topic, msg.partition, msg.offset, msg.key, msg.value
            self.positions[partition] = offset
            try:
                event = screen(raw, s.max_event_bytes, s.max_depth)
            except EventDecodeError as exc:
                dead[exc.reason] += 1
                deliveries.append(await self.send(s.dead_letter_topic, key,
                                                  dead_letter_value(exc, topic, partition, offset, raw)))
                continue
            types[_TAGS[type(event)]] += 1
            rkey = run_key(event)
            if key is not None and key != rkey.encode():
                misrouted += 1
            skey = state_key(event)
            slot = slots.get((partition, skey))
            if slot is None:
                value = pending.get((partition, skey), _MISSING)
                if value is _MISSING:
                    stored = self.table.get(partition, skey)
                    value = decode_value(stored) if stored else None
                slot = slots[(partition, skey)] = [value, False]
            value: RunValue | None = slot[0]
            if value is not None and offset <= value.offset:
                duplicates += 1  # applied before a crash or rebalance: its verdicts were delivered then
                continue
            config = fleet.resolve(event.agent_id)
            sample += 1
            timed = not sample & 7  # step() is timed for 1 event in 8: the histogram is a sample
            if timed:
                t0 = perf()
            state_in = value.state if value is not None else None
            try:
                result = stepper(state_in, event, config)
            except Exception as exc:  # an engine bug must not stop the fleet's stream
                log.exception("step() failed at %s:%s:%s", topic, partition, offset)
                err = EventDecodeError("engine_error", f"{type(exc).__name__}: {exc}")
                dead[err.reason] += 1
                deliveries.append(await self.send(s.dead_letter_topic, key,
                                                  dead_letter_value(err, topic, partition, offset, raw)))
                continue
            if timed:
                steps.append(perf() - t0)
            slot[0] = RunValue(offset=offset, touched=now, state=result.state)
            slot[1] = True
            if result.duplicate:
                duplicates += 1
                continue
            if result.guard_armed:
                arms += 1
            if after_step is not None:
                deliveries += await after_step(state_in, event, result)
            index = 0
            for det in result.detections:
                detections[(det.detector, det.level, m.tool(det.tool_name))] += 1
                if not det.emitted:
                    continue
                if det.detector == "compaction_loop_persisted":
                    aborts += 1
                verdict = Verdict(
                    verdict_id=f"{topic}:{partition}:{offset}:{index}", action=det.action,
                    agent_id=event.agent_id, run_id=event.run_id, session_id=event.session_id,
                    level=det.level, detector=det.detector, count=det.count, message=det.message,
                    warning_key=det.warning_key, tool_name=det.tool_name, paired_tool_name=det.paired_tool_name,
                    tool_call_id=getattr(event, "tool_call_id", None), event_ts=event.ts, ts=now,
                )
                index += 1
                published.append((verdict, event.ts))
                verdict_counts[(det.action, det.detector)] += 1
                deliveries.append(await self.send(s.control_topic, rkey.encode(), _verdict_encoder.encode(verdict)))
            if index == 0 and isinstance(event, ToolCall) and event.await_decision:
                verdict = Verdict(
                    verdict_id=f"{topic}:{partition}:{offset}:0", action="allow", agent_id=event.agent_id,
                    run_id=event.run_id, session_id=event.session_id, tool_name=event.tool_name,
                    tool_call_id=event.tool_call_id, event_ts=event.ts, ts=now,
                )
                published.append((verdict, event.ts))
                verdict_counts[("allow", "none")] += 1
                deliveries.append(await self.send(s.control_topic, rkey.encode(), _verdict_encoder.encode(verdict)))

        self._step_sample = sample
        # Snapshot the values now: later batches go on mutating the same RunState objects.
        writes = []
        for (partition, skey), (value, dirty) in slots.items():
            if dirty:
                writes.append((partition, skey, encode_value(value)))
                pending[(partition, skey)] = value
        counts = (types, dead, detections, verdict_counts, misrouted, duplicates, arms, aborts, steps)
        done = asyncio.ensure_future(self._complete(self._tail, deliveries, writes, slots, published, counts))
        self._tail = done
        return done

    async def _complete(self, previous: "asyncio.Future[None] | None", deliveries: list, writes: list,
                        slots: dict, published: list, counts: tuple) -> None:
        """Make one batch durable: its verdicts delivered, then its run values written."""
        if previous is not None:
            await previous  # batch order; a failed predecessor fails this one too
        if deliveries:
            await asyncio.gather(*deliveries)
        delivered_at = time.time()
        await self.table.write(writes)
        pending = self.pending
        for slot_key, (value, dirty) in slots.items():
            if dirty and pending.get(slot_key) is value:
                del pending[slot_key]
        self._count(counts, published, delivered_at)

    def _count(self, counts: tuple, published: list, delivered_at: float) -> None:
        m = self.metrics
        types, dead, detections, verdict_counts, misrouted, duplicates, arms, aborts, steps = counts
        for name, n in types.items():
            m.events.labels(name).inc(n)
        for reason, n in dead.items():
            m.dead_letters.labels(reason).inc(n)
        for labels, n in detections.items():
            m.detections.labels(*labels).inc(n)
        for labels, n in verdict_counts.items():
            m.verdicts.labels(*labels).inc(n)
        if misrouted:
            m.misrouted.inc(misrouted)
        if duplicates:
            m.duplicates.inc(duplicates)
        if arms:
            m.guard_arms.inc(arms)
        if aborts:
            m.guard_aborts.inc(aborts)
        observe = m.step_seconds.observe
        for dt in steps:
            observe(dt)
        observe = m.event_to_verdict.observe
        for _verdict, ts in published:
            if ts is not None:
                observe(max(0.0, delivered_at - ts))

    async def expire(self, owned_partitions: set[int], now: float | None = None) -> tuple[int, int]:
        """Drop idle runs and old ended-run markers; return (expired, active runs left)."""
        await self.drain()  # under the lock: no batch in flight, ``pending`` is empty
        now = time.time() if now is None else now
        s = self.settings
        active = 0
        drop: list[tuple[int, bytes, None]] = []
        for partition, key, raw in list(self.table.owned_items(owned_partitions)):
            try:
                value = decode_value(raw)
            except msgspec.DecodeError:
                drop.append((partition, key, None))
                continue
            ttl = s.run_ttl if value.state is not None else s.ended_ttl
            if now - value.touched > ttl:
                drop.append((partition, key, None))
            elif value.state is not None:
                active += 1
        await self.table.write(drop)
        expired = len(drop)
        if expired:
            self.metrics.expired_runs.inc(expired)
        self.metrics.active_runs.set(active)
        return expired, active
