"""The worker's batch path: :func:`~streams.worker.batch.apply_batch`, then the :class:`Committer`.

``process()`` applies one batch under a lock (batches are applied one at a
time, in fetch order) and returns the future that is done once the batch is
durable; the consumer acks the batch's records only then. The order of
effects that crash safety rests on is spelled out in
:mod:`streams.worker.committer`; expiry of idle runs runs under the same
lock after draining, so it never races a batch in flight.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Iterable

import msgspec

from streams.worker.batch import BatchResult, Limits, apply_batch, default_step
from streams.worker.committer import Committer, SendFn
from streams.worker.metrics import Metrics
from streams.detection import enforcement
from streams.worker.runcodec import decode_value, encode_value
from streams.worker.runtable import RunTable
from streams.worker.screening import without_raw
from streams.worker.settings import Settings

log = logging.getLogger(__name__)


class RunProcessor:
    def __init__(self, settings: Settings, metrics: Metrics, table: RunTable, send: SendFn,
                 fleet: Callable[[], Any]) -> None:
        self.settings = settings
        self.metrics = metrics
        self.table = table
        self.fleet = fleet  # () -> current FleetConfig (live overrides swap it)
        self.lock = asyncio.Lock()
        self.positions: dict[int, int] = {}  # partition -> last offset seen (lag)
        # fleet config -> (stepper, after_step) of one batch: the fleet extensions' hooks (streams.worker.fleet_agent)
        self.hooks: Callable[[Any], tuple[Any, Any]] = lambda fleet: (default_step, None)
        self.limits = Limits(control_topic=settings.control_topic, shadow_topic=settings.shadow_topic,
                             dead_letter_topic=settings.dead_letter_topic,
                             max_event_bytes=settings.max_event_bytes, max_depth=settings.max_depth,
                             ack_timeout=settings.ack_timeout)
        dead_topic = settings.dead_letter_topic
        self.committer = Committer(
            table, send, flush_interval=settings.state_flush_interval, on_durable=self._count,
            on_dropped=lambda out, exc: metrics.publish_dropped.labels(out.topic).inc(),
            on_retry=lambda out, exc: metrics.publish_retries.labels(out.topic).inc(),
            shrink_dead_letter=lambda out: without_raw(out) if out.topic == dead_topic else None,
        )

    async def process(self, messages: Iterable[Any]) -> "asyncio.Future[None]":
        """Apply a batch; return a future that is done once the batch is durable (then ack it)."""
        async with self.lock:
            fleet = self.fleet()
            stepper, after_step = self.hooks(fleet)
            result = apply_batch(messages, self.committer.read, fleet, self.limits, self.metrics.tool,
                                 stepper=stepper, after_step=after_step)
            self.positions.update(result.positions)
            return await self.committer.submit(result)

    async def drain(self) -> None:
        await self.committer.drain()

    def _count(self, result: BatchResult, delivered_at: float) -> None:
        m, c = self.metrics, result.counts
        for name, n in c.types.items():
            m.events.labels(name).inc(n)
        for reason, n in c.dead.items():
            m.dead_letters.labels(reason).inc(n)
        for labels, n in c.detections.items():
            m.detections.labels(*labels).inc(n)
        for labels, n in c.verdicts.items():
            m.verdicts.labels(*labels).inc(n)
        for labels, n in c.loop_tokens.items():
            m.loop_tokens.labels(*labels).inc(n)
        for labels, n in c.loop_cost.items():
            m.loop_cost.labels(*labels).inc(n)
        if c.misrouted:
            m.misrouted.inc(c.misrouted)
        if c.duplicates:
            m.duplicates.inc(c.duplicates)
        if c.guard_arms:
            m.guard_arms.inc(c.guard_arms)
        if c.guard_aborts:
            m.guard_aborts.inc(c.guard_aborts)
        for outcome, n in c.acks.items():
            m.acks.labels(outcome).inc(n)
        for action, n in c.unacked.items():
            m.unacked.labels(action).inc(n)
        for kind, n in c.violations.items():
            m.violations.labels(kind).inc(n)
        observe = m.ack_seconds.observe
        for dt in c.ack_seconds:
            observe(dt)
        observe = m.step_seconds.observe
        for dt in c.step_seconds:
            observe(dt)
        observe = m.event_to_verdict.observe
        for out in result.outgoing:
            if out.event_ts is not None:
                observe(max(0.0, delivered_at - out.event_ts))

    async def expire(self, owned_partitions: set[int], now: float | None = None) -> tuple[int, int]:
        """Drop idle runs and old ended-run markers; return (expired, active runs left)."""
        await self.drain()  # under the lock: no batch in flight, the committer's ``pending`` is empty
        now = time.time() if now is None else now
        s = self.settings
        active = 0
        drop: list[tuple[int, bytes, bytes | None]] = []
        unacked: dict[str, int] = {}
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
                late = enforcement.overdue(value.state, now, s.ack_timeout)
                if late:  # the sweep is the deadline of runs that went quiet: write the state back
                    for action in late:
                        unacked[action] = unacked.get(action, 0) + 1
                    drop.append((partition, key, encode_value(value)))
        await self.table.write(drop)
        for action, n in unacked.items():
            self.metrics.unacked.labels(action).inc(n)
        expired = sum(1 for item in drop if item[2] is None)
        if expired:
            self.metrics.expired_runs.inc(expired)
        self.metrics.active_runs.set(active)
        return expired, active
