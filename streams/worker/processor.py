"""The worker's batch path: :func:`~loopwarden.worker.batch.apply_batch`, then the :class:`Committer`.

``process()`` applies one batch under a lock (batches are applied one at a
time, in fetch order) and returns the future that is done once the batch is
durable; the consumer acks the batch's records only then. The order of
effects that crash safety rests on is spelled out in
:mod:`loopwarden.worker.committer`; the expiry sweep of idle runs takes the
same lock a chunk at a time and never drops a run a batch has just touched.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from loopwarden.detection import enforcement
from loopwarden.detection.state import UnknownFormatVersion
from loopwarden.worker.batch import BatchResult, Limits, StepSampler, apply_batch
from loopwarden.worker.committer import CommitEvents, CommitLimits, Committer, Publisher, SendFn
from loopwarden.worker.metrics import Metrics
from loopwarden.worker.runcodec import RunValue, decode_value, encode_value
from loopwarden.worker.runtable import RunTable
from loopwarden.worker.screening import without_raw
from loopwarden.worker.settings import Settings
from loopwarden.worker.trust import hash_secret

log = logging.getLogger(__name__)

# _judge's verdicts for a stored value that cannot be read (the reasons of Metrics.unreadable_runs).
UNREADABLE = ("unknown_version", "undecodable")


class CountedCommits(CommitEvents):
    """The committer's reports, counted in the worker's metrics."""

    def __init__(self, processor: RunProcessor) -> None:
        self.processor = processor
        self.metrics = processor.metrics

    def durable(self, result: BatchResult, delivered_at: float) -> None:
        self.processor._count(result, delivered_at)

    def oversized(self, slot: tuple[int, bytes], size: int) -> None:
        self.metrics.oversized_runs.inc()

    def unreadable(self, reason: str) -> None:
        self.metrics.unreadable_runs.labels(reason).inc()


def alive(value: RunValue | None) -> bool:
    """A run with state (``loopwarden_active_runs``), not an ended-run marker nor a deleted value."""
    return value is not None and value.state is not None


class SweepCount:
    """Live runs per partition as one expiry sweep counts them, exact while batches run between its chunks.

    Each partition is counted as it was the moment the scan read it (its stored runs, each
    overridden by the value ``pending`` held then), then moved by every run a batch starts or ends
    and every run the sweep drops after that moment. A count from the listing alone missed the
    runs staged but not yet flushed and those batches started while the sweep ran.
    """

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}

    def read(self, partition: int, staged: dict[bytes, RunValue | None]) -> None:
        """The scan reads ``partition``; ``staged``: its values in ``pending`` at that moment."""
        self.counts[partition] = sum(map(alive, staged.values()))

    def move(self, partition: int, change: int) -> None:
        if partition in self.counts:
            self.counts[partition] += change


class RunProcessor:
    def __init__(
        self, settings: Settings, metrics: Metrics, table: RunTable, send: SendFn, fleet: Callable[[], Any]
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.table = table
        self.fleet = fleet  # () -> current FleetConfig (live overrides swap it)
        self.lock = asyncio.Lock()
        self.positions: dict[int, int] = {}  # partition -> last offset seen (lag)
        self.live: dict[int, int] = {}  # partition -> runs with state (loopwarden_active_runs)
        self.sweep: SweepCount | None = None  # the count of the expiry sweep running, if any
        # fleet config -> (incident board, after_step) of one batch: the fleet extensions' hooks
        # (loopwarden.worker.fleet_agent)
        self.hooks: Callable[[Any], tuple[Any, Any]] = lambda fleet: (None, None)
        self.sampler = StepSampler()  # the step-time sample runs on across batches
        self.limits = Limits(
            control_topic=settings.control_topic,
            shadow_topic=settings.shadow_topic,
            dead_letter_topic=settings.dead_letter_topic,
            max_event_bytes=settings.max_event_bytes,
            max_depth=settings.max_depth,
            ack_timeout=settings.ack_timeout,
            misrouted_dead_letter=settings.misrouted == "dead_letter",
            hash_key=hash_secret(settings),
        )
        dead_topic = settings.dead_letter_topic
        publisher = Publisher(
            send,
            on_dropped=lambda out, exc: metrics.publish_dropped.labels(out.topic).inc(),
            on_retry=lambda out, exc: metrics.publish_retries.labels(out.topic).inc(),
            shrink_dead_letter=lambda out: without_raw(out) if out.topic == dead_topic else None,
        )
        limits = CommitLimits(
            flush_interval=settings.state_flush_interval, max_value_bytes=settings.max_run_value_bytes
        )
        self.committer = Committer(table, publisher, limits, CountedCommits(self))

    async def process(self, messages: Iterable[Any]) -> asyncio.Future[None]:
        """Apply a batch; return a future that is done once the batch is durable (then ack it)."""
        async with self.lock:
            fleet = self.fleet()
            board, after_step = self.hooks(fleet)
            read = self.committer.read
            before: dict[tuple[int, bytes], RunValue | None] = {}

            def remembered(partition: int, key: bytes) -> RunValue | None:
                value = before[(partition, key)] = read(partition, key)
                return value

            result = apply_batch(
                messages,
                remembered,
                fleet,
                self.limits,
                self.metrics.tool,
                sampler=self.sampler,
                board=board,
                after_step=after_step,
            )
            self.positions.update(result.positions)
            self._count_live(result.writes, before)
            return await self.committer.submit(result)

    def _count_live(self, writes: dict, before: dict) -> None:
        """Runs started or ended by a batch, per partition, between two sweeps (``live``). A partition
        no sweep has counted stays uncounted: its runs from before are not known yet."""
        live, sweep = self.live, self.sweep
        for slot, value in writes.items():
            partition = slot[0]
            if partition not in live and (sweep is None or partition not in sweep.counts):
                continue
            old = before[slot] if slot in before else self.committer.read(*slot)
            change = alive(value) - alive(old)
            if change:
                if partition in live:
                    live[partition] += change
                if sweep is not None:
                    sweep.move(partition, change)

    def recount(self) -> None:
        """Forget every partition's count (the assignment changed: a partition that left and came
        back missed the runs its other owner started); the next sweep counts them again."""
        self.live = {}
        self.sweep = None  # the running sweep's count is of the assignment before

    def active_runs(self, owned_partitions: set[int]) -> int:
        """Runs with state in the owned partitions: each partition's count from its last sweep, moved
        by the runs batches started and ended since."""
        return sum(self.live.get(p, 0) for p in owned_partitions)

    def uncounted(self, owned_partitions: set[int]) -> set[int]:
        """Owned partitions no sweep has counted yet (just assigned): a sweep is due."""
        return owned_partitions - self.live.keys() if self.table.scannable else set()

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
        for labels, n in c.runner_decisions.items():
            m.runner_decisions.labels(*labels).inc(n)
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

    async def expire(self, owned_partitions: set[int], now: float | None = None, chunk: int = 2000) -> tuple[int, int]:
        """Drop idle runs and old ended-run markers; return (expired, active runs left).

        The sweep takes the batch lock for ``chunk`` table entries at a time, so a worker holding
        100k runs does not stop its stream for the whole scan. Between chunks batches go on: a run
        with a value not yet flushed (``pending``) was touched just now and is skipped, and a run
        the scan found idle is looked up again before it is dropped (the scan reads a snapshot).
        """
        now = time.time() if now is None else now
        expired = 0
        unacked: dict[str, int] = {}
        unreadable: dict[str, int] = {}
        pending = self.committer.pending
        sweep = self.sweep = SweepCount()

        def entries() -> Iterable[tuple[int, bytes, bytes, bool]]:
            for partition, listing in self.table.owned_listings(owned_partitions):  # read under the lock
                staged = {key: value for (p, key), value in pending.items() if p == partition}
                sweep.read(partition, staged)
                for key, raw in listing:
                    yield partition, key, raw, key in staged

        scan = iter(entries())
        while True:
            async with self.lock:
                writes: list[tuple[int, bytes, bytes | None]] = []
                scanned = 0
                for partition, key, raw, staged in scan:
                    scanned += 1
                    if (partition, key) in pending:  # staged just now: not the sweep's to judge
                        if not staged:  # counted as stored when the partition was read
                            sweep.move(partition, self._stored_alive(raw))
                    else:
                        verdict, value, late = self._judge(raw, now)
                        if not staged:
                            sweep.move(partition, alive(value))
                        if verdict != "keep":
                            current = self.table.get(partition, key)
                            if current != raw:  # written since the scan's snapshot
                                verdict, value, late = self._judge(current, now) if current else ("gone", None, [])
                        if verdict in UNREADABLE or verdict == "drop":
                            writes.append((partition, key, None))
                            sweep.move(partition, -alive(value))
                        if verdict in UNREADABLE:  # dropped unread: counted apart from the idle runs
                            unreadable[verdict] = unreadable.get(verdict, 0) + 1
                        elif verdict == "drop":
                            expired += 1
                        elif verdict == "rewrite":  # the sweep is the deadline of runs that went quiet
                            writes.append((partition, key, encode_value(value)))
                            for action in late:
                                unacked[action] = unacked.get(action, 0) + 1
                    if scanned >= chunk:
                        break
                await self.table.write(writes)
            if scanned < chunk:
                break
            await asyncio.sleep(0)  # let batches in between chunks
        for action, n in unacked.items():
            self.metrics.unacked.labels(action).inc(n)
        for reason, n in unreadable.items():
            log.error("expiry sweep dropped %d stored run values unread (%s)", n, reason)
            self.metrics.unreadable_runs.labels(reason).inc(n)
        if expired:
            self.metrics.expired_runs.inc(expired)
        if self.sweep is sweep:  # no rebalance since it began
            self.sweep = None
            if self.table.scannable:  # the sweep's count replaces the running one (partitions not owned: forgotten)
                self.live = sweep.counts
        self.metrics.active_runs.set(self.active_runs(owned_partitions))
        return expired, sum(sweep.counts.values())

    @staticmethod
    def _stored_alive(raw: bytes) -> bool:
        try:
            return alive(decode_value(raw))
        except (UnknownFormatVersion, msgspec.DecodeError):
            return False

    def _judge(self, raw: bytes, now: float) -> tuple[str, RunValue | None, list[str]]:
        """One stored run: ``drop`` (idle past its TTL), ``rewrite`` (verdicts it awaited went overdue:
        taken out, their actions returned), ``keep``, or one of ``UNREADABLE`` (dropped too: a batch
        would start the run afresh anyway, see ``Committer.read``)."""
        s = self.settings
        try:
            value = decode_value(raw)
        except UnknownFormatVersion:
            return "unknown_version", None, []
        except msgspec.DecodeError:
            return "undecodable", None, []
        ttl = s.run_ttl if value.state is not None else s.ended_ttl
        if now - value.touched > ttl:
            return "drop", value, []
        late = enforcement.overdue(value.state, now, s.ack_timeout) if value.state is not None else []
        return ("rewrite" if late else "keep"), value, late
