"""The order of effects that makes a batch durable: the half of the batch path that does I/O.

For each batch handed in by :meth:`Committer.submit`, in batch order:

1. the new run values are encoded at once (a snapshot: later batches go on
   mutating the same state objects) and kept in ``pending``, where the next
   batches read them before the table;
2. every outgoing record (verdicts, dead letters) is handed to the producer
   without waiting, so the producer can batch them;
3. once the previous batch got this far, every delivery of this batch is
   awaited (retrying what failed, see below), and the batch's run values
   join the next state flush;
4. a flush writes each run once to the table (RocksDB and changelog),
   whatever number of batches touched it since the last flush, then drops
   those entries from ``pending``. Flushes run in order, each
   ``flush_interval`` after the first batch that joined it: a run that gets
   events in many batches is written once per interval, not once per batch
   (at 2,000 events/s of a fleet, 0.5 s turns about one changelog record per
   event into one per three). A stopping worker flushes at once
   (:meth:`Committer.flush_now`): Faust's stop waits for every ack;
5. only then is the batch's future done, and only then does the consumer
   ack (and later commit) its offsets.

So a state that is durable always has its verdicts durable too; a crash
before step 5 replays the events onto the old state and republishes the
same verdicts under the same ``verdict_id``. Verdicts never wait for a
flush. At most ``max_inflight`` batches are between step 2 and step 3 at
once, so a slow broker holds up the next fetch; batches waiting only for a
flush do not, up to ``max_unflushed`` records not yet durable (the
consumer keeps them, and ``pending`` their runs), so writes slower than
the fetches still hold the fetch loop back instead of filling memory.

A run value larger than the changelog accepts (``max_value_bytes``, key
included) would fail its flush on every worker that replays the run's
events. It is never sent: that run's state is reset at step 1 (its value
keeps the offset, so the events are not applied twice, with an ended state,
so the run's next event starts afresh), logged and counted
(:meth:`CommitEvents.oversized`); the stream goes on. Identifier caps
(``ID_CAPS``) and knob caps (``KNOB_CAPS``) keep real runs far below it.

A publish that fails is retried with capped exponential backoff and the
batch stays unacked: a broker outage only delays. A record that can never
be published (larger than the producer or topic accepts, a topic that is
invalid or not allowed) is tried ``permanent_attempts`` times, then logged,
counted and skipped with its position, so one record cannot stop the
stream. A dead letter too large to publish whole is sent once more without
its raw bytes (reason, detail and position still reach the operator).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from loopwarden.detection.state import UnknownFormatVersion
from loopwarden.kafka.errors import is_permanent, too_large
from loopwarden.worker.batch import BatchResult, Outgoing
from loopwarden.worker.runcodec import RunValue, decode_value, encode_value

log = logging.getLogger(__name__)

# send(topic, key, value) -> awaitable that resolves to the delivery future
SendFn = Callable[[str, "bytes | None", bytes], Awaitable[Awaitable[Any]]]


class PublishPolicy(msgspec.Struct, frozen=True, kw_only=True):
    backoff_initial: float = 0.05
    backoff_max: float = 5.0
    permanent_attempts: int = 3


class Publisher:
    """Hands records to the producer and sees each one delivered (the module's retry rules): a failure
    is retried with capped exponential backoff; a record that can never be published is tried
    ``permanent_attempts`` times, then reported (``on_dropped``) and skipped; a dead letter too large
    is sent once more without its raw bytes. The batch path (:class:`Committer`) and the fleet
    agents publish through it."""

    def __init__(
        self,
        send: SendFn,
        policy: PublishPolicy | None = None,
        *,
        on_dropped: Callable[[Outgoing, BaseException], None] | None = None,
        on_retry: Callable[[Outgoing, BaseException], None] | None = None,
        shrink_dead_letter: Callable[[Outgoing], Outgoing | None] | None = None,
    ) -> None:
        self.send = send
        self.policy = policy or PublishPolicy()
        self.on_dropped = on_dropped
        self.on_retry = on_retry
        self.shrink_dead_letter = shrink_dead_letter
        self.stopping = False

    async def publish(self, outs: list[Outgoing]) -> None:
        """Hand every record over, then see each delivered (retrying failures); in hand-over order."""
        await self.settle([(out, await self.start(out)) for out in outs])

    async def settle(self, first: list[tuple[Outgoing, Any]]) -> None:
        """Await records already handed over: one wait for every delivery; only one that failed gets a
        retry loop (a task) of its own."""
        if not first:
            return
        handed = [(out, fut if isinstance(fut, BaseException) else asyncio.ensure_future(fut)) for out, fut in first]
        futures = [fut for _, fut in handed if not isinstance(fut, BaseException)]
        if futures:
            await asyncio.wait(futures)
        failed = [
            (out, fut)
            for out, fut in handed
            if isinstance(fut, BaseException) or fut.cancelled() or fut.exception() is not None
        ]
        if failed:
            await asyncio.gather(*(self.deliver(out, fut) for out, fut in failed))

    async def start(self, out: Outgoing) -> Any:
        """Hand one record to the producer; the delivery future, or the exception the hand-over raised."""
        try:
            return await self.send(out.topic, out.key, out.value)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return exc

    async def deliver(self, out: Outgoing, first: Any) -> None:
        """Await one delivery, retrying as the module docstring says; returns once delivered or given up."""
        p = self.policy
        attempt, permanent, backoff = first, 0, p.backoff_initial
        while True:
            try:
                if isinstance(attempt, BaseException):
                    raise attempt
                await attempt
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if is_permanent(exc):
                    if too_large(exc) and self.shrink_dead_letter is not None:
                        smaller = self.shrink_dead_letter(out)
                        if smaller is not None and smaller is not out:
                            log.warning(
                                "dead letter for %s too large to publish whole (%d bytes); "
                                "sending it without the raw bytes",
                                out.source,
                                len(out.value),
                            )
                            out = smaller
                            attempt = await self.start(out)
                            continue
                    permanent += 1
                    if permanent >= p.permanent_attempts:
                        log.error(
                            "giving up on a record for %s at %s after %d attempts: %r",
                            out.topic,
                            out.source,
                            permanent,
                            exc,
                        )
                        if self.on_dropped is not None:
                            self.on_dropped(out, exc)
                        return
                elif self.stopping:
                    raise
                if self.on_retry is not None:
                    self.on_retry(out, exc)
                log.warning("publish to %s for %s failed (%r); retrying in %.2fs", out.topic, out.source, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(p.backoff_max, backoff * 2)
                attempt = await self.start(out)


class CommitLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The committer's bounds (the module docstring says what each holds back)."""

    max_inflight: int = 4  # batches between step 2 and step 3
    flush_interval: float = 0.0  # step 4 waits this long after the first batch that joined it
    max_unflushed: int = 10_000  # records not yet durable before submit() waits
    max_value_bytes: int | None = None  # key + value of one run, at most (None: unbounded)


class CommitEvents:
    """What the committer tells its owner; each does nothing here (the worker counts them)."""

    def durable(self, result: BatchResult, delivered_at: float) -> None:
        """Step 5 of a batch is done (``delivered_at``: when step 3 ended)."""

    def oversized(self, slot: tuple[int, bytes], size: int) -> None:
        """A run's value was larger than ``max_value_bytes``: its state was reset at step 1."""

    def unreadable(self, reason: str) -> None:
        """A stored value :meth:`Committer.read` discarded: ``unknown_version`` or ``undecodable``."""


class Committer:
    """Owns ``pending`` and the completion chain; one per worker process.

    Its collaborators: the run ``table`` (``.get(partition, key) -> bytes | None``, async
    ``.write([(partition, key, bytes | None)])``), the :class:`Publisher` of the batch's records,
    its :class:`CommitLimits` and the :class:`CommitEvents` it reports to.
    """

    def __init__(
        self,
        table: Any,
        publisher: Publisher,
        limits: CommitLimits | None = None,
        events: CommitEvents | None = None,
    ) -> None:
        self.table = table
        self.publisher = publisher
        self.limits = limits = limits or CommitLimits()
        self.events = events or CommitEvents()
        self.max_inflight = limits.max_inflight
        self.flush_interval = limits.flush_interval
        self.max_unflushed = limits.max_unflushed
        self.max_value_bytes = limits.max_value_bytes
        self.pending: dict[tuple[int, bytes], RunValue | None] = {}
        self._tail: asyncio.Future | None = None  # the last batch's completion (step 5)
        self._delivered_tail: asyncio.Future | None = None  # the last batch's step 3
        self._inflight: collections.deque = collections.deque()  # step-3 futures: the in-flight bound
        self._unflushed: collections.deque = collections.deque()  # (step-5 future, records) not yet durable
        self._unflushed_records = 0
        self._unwritten: dict[tuple[int, bytes], bytes | None] = {}  # what the next flush writes
        self._next_flush: asyncio.Future | None = None  # the flush that batches now join
        self._last_flush: asyncio.Future | None = None  # flushes run one after another
        self._hurry = asyncio.Event()  # set: the waiting flush goes now (flush_now); binds its loop at first wait
        self._hurry_always = False

    def read(self, partition: int, key: bytes) -> RunValue | None:
        """A run's value as the next batch must see it: not yet durable values first."""
        slot = (partition, key)
        if slot in self.pending:
            return self.pending[slot]
        stored = self.table.get(partition, key)
        if not stored:
            return None
        try:
            return decode_value(stored)
        except UnknownFormatVersion as exc:  # written by a newer worker (a rollback): this run only
            log.error("run value at partition %s key %r: %s; starting the run afresh", partition, key, exc)
            reason = "unknown_version"
        except msgspec.DecodeError:
            log.error("undecodable run value at partition %s key %r: starting the run afresh", partition, key)
            reason = "undecodable"
        self.events.unreadable(reason)
        return None

    async def submit(self, result: BatchResult) -> asyncio.Future[None]:
        """Steps 1-2 now; returns the future of steps 3-5 (done = ack the batch's records)."""
        # 1. stage: encode the run values (a snapshot) and keep them in ``pending``
        writes, staged = self._stage(result.writes)
        # 2. hand every outgoing record to the producer, without waiting
        first = [(out, await self.publisher.start(out)) for out in result.outgoing]
        # 3. after the previous batch's step 3: await the deliveries, then join the next flush
        delivered = asyncio.ensure_future(self._delivered(self._delivered_tail, first, writes))
        self._delivered_tail = delivered
        # 4-5. once that flush is written (and the previous batch is done): the batch is durable
        done = asyncio.ensure_future(self._complete(delivered, self._tail, staged, result))
        self._tail = done
        await self._hold_back(delivered, done, result.records)
        return done

    def _stage(
        self, values: dict[tuple[int, bytes], RunValue | None]
    ) -> tuple[dict[tuple[int, bytes], bytes | None], list[tuple[tuple[int, bytes], RunValue | None]]]:
        """Step 1: each run value encoded now, into ``pending``; an oversized one reset (module docstring)."""
        writes: dict[tuple[int, bytes], bytes | None] = {}
        staged: list[tuple[tuple[int, bytes], RunValue | None]] = []
        pending = self.pending
        limit = self.max_value_bytes
        for slot, value in values.items():
            try:
                encoded = None if value is None else encode_value(value)
            except Exception:  # e.g. a string the codec cannot hold: lose that run's state, not the stream
                log.exception("run value at %s not encodable; dropping that run's state", slot)
                encoded, value = None, None
            if encoded is not None and limit is not None and len(encoded) + len(slot[1]) > limit:
                size = len(encoded) + len(slot[1])
                log.error(
                    "run state at partition %s key %r is %d bytes, more than the changelog accepts (%d): "
                    "the run's state is reset",
                    slot[0],
                    slot[1][:200],
                    size,
                    limit,
                )
                self.events.oversized(slot, size)
                value = RunValue(value.offset, value.touched, None)
                encoded = encode_value(value)
            writes[slot] = encoded
            pending[slot] = value
            staged.append((slot, value))
        return writes, staged

    async def _hold_back(self, delivered: asyncio.Future, done: asyncio.Future, records: int) -> None:
        """The bounds: at most ``max_inflight`` batches awaiting step 3, ``max_unflushed`` records step 5."""
        inflight = self._inflight
        inflight.append(delivered)
        while inflight and inflight[0].done():
            inflight.popleft()
        while len(inflight) > self.max_inflight:
            await asyncio.shield(inflight[0])
            while inflight and inflight[0].done():
                inflight.popleft()
        self._unflushed.append((done, records))
        self._unflushed_records += records
        self._forget_durable()
        while self._unflushed_records > self.max_unflushed and len(self._unflushed) > 1:
            await asyncio.shield(self._unflushed[0][0])
            self._forget_durable()

    def _forget_durable(self) -> None:
        unflushed = self._unflushed
        while unflushed and unflushed[0][0].done():
            self._unflushed_records -= unflushed.popleft()[1]

    async def drain(self) -> None:
        """Wait until every batch submitted so far is durable."""
        if self._tail is not None:
            await asyncio.shield(self._tail)

    async def _delivered(
        self, previous: asyncio.Future | None, first: list, writes: dict
    ) -> tuple[asyncio.Future, float]:
        """Step 3: in batch order, await the deliveries, then join the next flush; returns (flush, time)."""
        if previous is not None:
            await previous  # batch order; a failed predecessor fails this one too
        await self.publisher.settle(first)
        delivered_at = time.time()
        self._unwritten.update(writes)  # a later batch's value of a run replaces an earlier one's
        if self._next_flush is None:
            self._next_flush = asyncio.ensure_future(self._flush(self._last_flush))
            self._last_flush = self._next_flush
        return self._next_flush, delivered_at

    def flush_now(self, always: bool = False) -> None:
        """Let the flush that is waiting for its interval write at once; ``always``: every later one too.

        A stopping worker waits until every batch is durable, which would otherwise take up to
        ``flush_interval`` (the worker calls this with ``always`` when it starts to stop)."""
        self._hurry_always = self._hurry_always or always
        self._hurry.set()

    async def _flush(self, previous: asyncio.Future | None) -> None:
        """Step 4: after ``flush_interval``, write what the batches since the last flush left (in order)."""
        hurry = self._hurry
        if not hurry.is_set():
            try:
                await asyncio.wait_for(hurry.wait(), self.flush_interval)
            except TimeoutError:
                pass
        if not self._hurry_always:
            hurry.clear()  # hurried once: later flushes keep the interval
        self._next_flush = None  # batches delivered from now on join the next flush
        items, self._unwritten = self._unwritten, {}
        if previous is not None:
            await previous  # a failed flush fails the later ones: never a newer value over a lost older one
        await self.table.write([(slot[0], slot[1], value) for slot, value in items.items()])

    async def _complete(
        self, delivered: asyncio.Future, previous: asyncio.Future[None] | None, staged: list, result: BatchResult
    ) -> None:
        """Step 5: once the batch's flush is written and the batch before is done, it is durable."""
        flush, delivered_at = await delivered
        await flush
        if previous is not None:
            await previous  # acks in batch order
        pending = self.pending
        for slot, value in staged:
            if slot in pending and pending[slot] is value:
                del pending[slot]  # a later batch may have staged a newer value: keep that one
        self.events.durable(result, delivered_at)
