"""The runner's way to the broker: a bounded outbox, a producer that reconnects, quiet outages.

A runner must never wait for loopwarden, and never lose its protection
because the broker was down when it started. So events are not sent by the
caller: :meth:`Outbox.put` appends to a bounded buffer and returns at once;
one pump task connects (and reconnects, with back-off) and sends the
buffer in order. An event stays in the outbox until the broker confirmed
it; after a failure everything unconfirmed is sent again on the next
connection (the worker drops a repeated ``event_id``). The buffer is
bounded by events (``max_buffered``) and by bytes (``max_buffered_bytes``):
when either is reached, new events are dropped and counted
(``ClientStats.events_dropped``).

Only an outage is retried. An event larger than ``max_event_bytes`` is
never queued (the worker would dead-letter it), and one the client or
broker refuses for what it is (:func:`loopwarden.kafka.errors.is_permanent`:
too large, a forbidden topic) is dropped at once: both are counted
(``events_too_large``, ``events_refused``) and logged at most once per
``log_interval``, and the events behind them go on.

:class:`Outage` words an outage for the log: its first failure, then at
most one line per ``interval`` while it lasts, and one when it ends, so a
dead broker costs a few lines, not one per retry.

Stopping never depends on a cancel being delivered: Python 3.11's
``asyncio.wait_for`` loses a cancel that arrives as the awaited call
finishes (a loop busy for a moment is enough), so the loops here check a
``closing`` flag, waits use ``asyncio.timeout``, and :func:`stop_task`
waits for a task only as long as it is told to.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiokafka import AIOKafkaProducer

from loopwarden.kafka.errors import is_permanent
from loopwarden.kafka.producer import PartitionMemo

log = logging.getLogger(__name__)
SEND_BATCH = 256  # records handed to the producer in one step (one timeout, one yield to the loop)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` for ``event``; whether it is set. Leaves no waiter task behind."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    done, _ = await asyncio.wait({waiter}, timeout=timeout)
    if not done:
        waiter.cancel()
    return event.is_set()


def _retrieve(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()  # read, so an abandoned task never logs "exception was never retrieved"


async def stop_task(task: asyncio.Future, timeout: float) -> bool:
    """Cancel ``task`` and wait for it at most ``timeout`` seconds (never longer); whether it ended.

    A task that lost its cancel (``wait_for`` in Python 3.11) is cancelled again; one that still
    runs after ``timeout`` is left to end by itself (its loop checks a closing flag) and logged.
    """
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=min(0.1, max(0.0, deadline - time.monotonic())))
        if done:
            _retrieve(task)
            return True
        if time.monotonic() >= deadline:
            task.add_done_callback(_retrieve)
            log.warning("loopwarden task %s did not stop within %.1fs", task.get_name(), timeout)
            return False


async def bounded(aw: Awaitable[Any], timeout: float) -> None:
    """Await ``aw`` for at most ``timeout`` seconds, then leave it (cancelled); never raises.

    For stopping clients of a dead broker: aiokafka's ``stop()`` may sit in a retry back-off."""
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        task.add_done_callback(_retrieve)
        log.debug("stop did not finish within %.1fs", timeout)
        return
    if not task.cancelled() and task.exception() is not None:
        log.debug("stop: %r", task.exception())


class Throttled:
    """One kind of dropped record: counted, logged the first time and then at most once per ``interval``."""

    __slots__ = ("what", "interval", "count", "_next")

    def __init__(self, what: str, interval: float = 60.0) -> None:
        self.what = what
        self.interval = interval
        self.count = 0
        self._next = 0.0

    def note(self, detail: object) -> None:
        self.count += 1
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval
            log.warning("loopwarden %s (%d so far): %s", self.what, self.count, detail)


class Outage:
    """Throttled log lines for one connection (producer, listener, config feed)."""

    __slots__ = ("what", "interval", "since", "failures", "_next")

    def __init__(self, what: str, interval: float = 60.0) -> None:
        self.what = what
        self.interval = interval
        self.since: float | None = None
        self.failures = 0
        self._next = 0.0

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, exc: BaseException) -> bool:
        """Note a failure; True the first time of an outage (the caller may act once on it)."""
        now = time.monotonic()
        self.failures += 1
        if self.since is None:
            self.since = now
            self._next = now + self.interval
            log.warning("loopwarden %s: broker unreachable (%r); retrying in the background", self.what, exc)
            return True
        if now >= self._next:
            self._next = now + self.interval
            log.warning(
                "loopwarden %s: broker still unreachable after %.0fs (%d attempts): %r",
                self.what,
                now - self.since,
                self.failures,
                exc,
            )
        return False

    def recovered(self) -> None:
        if self.since is not None:
            log.warning(
                "loopwarden %s: connected after %.1fs (%d failed attempts)",
                self.what,
                time.monotonic() - self.since,
                self.failures,
            )
        self.since = None
        self.failures = 0


class _Item:
    __slots__ = ("topic", "key", "value", "size", "done")

    def __init__(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.topic = topic
        self.key = key
        self.value = value
        self.size = len(value) + (len(key) if key is not None else 0)
        self.done = False  # confirmed by the broker, or refused for good


class OutboxLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The outbox's bounds and timings (the module docstring says what each holds back)."""

    max_buffered: int  # events not yet confirmed, at most
    send_timeout: float  # one connection attempt, one send step
    close_timeout: float  # stopping a producer or the pump
    backoff_max: float = 5.0  # between reconnection attempts
    log_interval: float = 60.0  # an outage or a drop is logged at most once per interval
    max_buffered_bytes: int = 64 << 20
    max_event_bytes: int = 1 << 20
    linger: float = 0.0  # seconds the pump waits for more events before a send step


class OutboxEvents:
    """What the outbox tells its owner, one call per event; each does nothing here (the client counts them)."""

    def sent(self) -> None:
        """The broker confirmed an event."""

    def dropped(self) -> None:
        """An event did not fit the buffer (``max_buffered`` or ``max_buffered_bytes``)."""

    def too_large(self) -> None:
        """An event over ``max_event_bytes`` was never queued."""

    def refused(self) -> None:
        """The client or broker refused an event for what it is; it was dropped."""

    def down(self) -> None:
        """The connection was lost (everything unconfirmed goes back to the front)."""

    def failed(self) -> None:
        """An event was still unconfirmed when the outbox closed."""


class Outbox:
    """Bounded, ordered, reconnecting event sender (one per client).

    Its collaborators: ``make_producer`` (a new, unstarted producer per connection), its
    :class:`OutboxLimits` and the :class:`OutboxEvents` it reports to.
    """

    def __init__(
        self,
        make_producer: Callable[[], AIOKafkaProducer],
        limits: OutboxLimits,
        events: OutboxEvents | None = None,
    ) -> None:
        self._make = make_producer
        self.limits = limits
        self.events = events or OutboxEvents()
        self.max_buffered = max(1, limits.max_buffered)
        self.max_buffered_bytes = max(1, limits.max_buffered_bytes)
        self.max_event_bytes = max(1, limits.max_event_bytes)
        self.send_timeout = limits.send_timeout
        self.close_timeout = limits.close_timeout
        self.linger = limits.linger
        self.partitions = PartitionMemo()
        self.backoff_max = limits.backoff_max
        self.outage = Outage("event producer", limits.log_interval)
        self.too_large = Throttled("events over max_event_bytes dropped", limits.log_interval)
        self.refused = Throttled("events the broker refuses for good dropped", limits.log_interval)
        self._unsent: deque[_Item] = deque()
        self._inflight: deque[_Item] = deque()  # sent, not yet confirmed (in send order)
        self._bytes = 0  # key + value bytes of every item not yet done
        self._wake = asyncio.Event()
        self._broken = False
        self._closing = False
        self.connected = asyncio.Event()
        self._producer: AIOKafkaProducer | None = None
        self._task: asyncio.Task | None = None
        self._attempted = asyncio.Event()  # set after the first connection attempt, won or lost

    def __len__(self) -> int:
        return len(self._unsent) + len(self._inflight)

    @property
    def buffered_bytes(self) -> int:
        """Key and value bytes of the events not yet confirmed (at most ``max_buffered_bytes``)."""
        return self._bytes

    def put(self, topic: str, key: bytes | None, value: bytes) -> bool:
        """Queue one record; False (and counted) when it is too large or the buffer is full. Never waits."""
        item = _Item(topic, key, value)
        if len(value) > self.max_event_bytes:
            self.too_large.note(f"{len(value)} bytes > {self.max_event_bytes}")
            self.events.too_large()
            return False
        if len(self) >= self.max_buffered or self._bytes + item.size > self.max_buffered_bytes:
            self.events.dropped()
            return False
        self._unsent.append(item)
        self._bytes += item.size
        self._wake.set()
        return True

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._pump(), name="loopwarden-outbox")

    async def first_attempt(self, timeout: float) -> bool:
        """Wait (bounded) for the first connection attempt; whether it connected."""
        await wait_event(self._attempted, timeout)
        return self.connected.is_set()

    async def _connect(self) -> AIOKafkaProducer | None:
        producer = self._make()
        try:
            async with asyncio.timeout(self.send_timeout):
                await producer.start()
        except Exception as exc:  # noqa: BLE001 - broker down, DNS, auth: all retried
            self.outage.failed(exc)
            await self._stop(producer)
            return None
        return producer

    def _resolve(self, item: _Item) -> None:
        """The item is done: confirmed or refused; it no longer counts against the byte bound."""
        if not item.done:
            item.done = True
            self._bytes -= item.size

    def _refuse(self, item: _Item, exc: BaseException) -> None:
        self._resolve(item)
        self.refused.note(f"{exc!r} ({item.size} bytes for {item.topic})")
        self.events.refused()

    async def _pump(self) -> None:
        """The one sender; each turn takes the first of these steps that applies:

        1. not connected: connect (backing off while the broker is down);
        2. a delivery failed: drop the connection, unconfirmed events back to the front;
        3. nothing to send: wait for an event (and ``linger`` for more);
        4. send up to ``SEND_BATCH`` events from the head, in order (each confirmed in
           :meth:`_delivered`);
        5. a send failed: a refused event is dropped and the rest go on; an outage
           drops the connection and backs off.
        """
        backoff = 0.1
        while not self._closing:
            if self._producer is None:  # 1. connect
                producer = await self._connect()
                self._attempted.set()
                if producer is None:
                    await asyncio.sleep(backoff)
                    backoff = min(self.backoff_max, backoff * 2)
                    continue
                if self._closing:
                    await self._stop(producer)
                    return
                backoff = 0.1
                self._producer = producer
                self._broken = False
                self.outage.recovered()
                self.connected.set()
            if self._broken:  # 2. a delivery failed
                await self._reset()
                continue
            if not self._unsent:  # 3. wait for events
                self._wake.clear()
                await self._wake.wait()
                if self.linger > 0 and len(self._unsent) < SEND_BATCH:
                    await asyncio.sleep(self.linger)  # gather what comes meanwhile: one step sends it all
                continue
            producer = self._producer  # 4. send from the head
            item = self._unsent[0]
            try:
                async with asyncio.timeout(self.send_timeout):
                    for _ in range(SEND_BATCH):
                        partition = (
                            None if item.key is None else self.partitions.partition(producer, item.topic, item.key)
                        )
                        delivery = await producer.send(item.topic, item.value, key=item.key, partition=partition)
                        self._unsent.popleft()
                        self._inflight.append(item)
                        delivery.add_done_callback(lambda d, item=item: self._delivered(d, item))
                        if delivery.done() or not self._unsent or self._broken:
                            break  # an outcome known at once is seen (next step) before more are sent
                        item = self._unsent[0]
            except Exception as exc:  # noqa: BLE001 - 5. KafkaError, timeout: the item stays at the head
                if is_permanent(exc):  # retrying cannot cure it: drop this one, the rest go on
                    self._unsent.popleft()
                    self._refuse(item, exc)
                    continue
                self.outage.failed(exc)
                await self._reset()
                await asyncio.sleep(backoff)
                backoff = min(self.backoff_max, backoff * 2)
                continue
            await asyncio.sleep(0)  # a delivery that failed at once is seen before the next batch

    def _delivered(self, delivery: asyncio.Future, item: _Item) -> None:
        # Always read the outcome: an unread failed future logs "exception was never retrieved".
        exc = None if delivery.cancelled() else delivery.exception()
        if exc is None and not delivery.cancelled():
            if not item.done:
                self._resolve(item)
                self.events.sent()
        elif exc is not None and is_permanent(exc):
            if not item.done:
                self._refuse(item, exc)
        else:
            if not self._broken and self._producer is not None:
                self._broken = True
                self.outage.failed(exc or ConnectionError("delivery cancelled"))
                self._wake.set()
            return
        inflight = self._inflight
        while inflight and inflight[0].done:
            inflight.popleft()

    async def _reset(self) -> None:
        """Drop the connection; everything unconfirmed goes back to the front, in order."""
        self.connected.clear()
        producer, self._producer = self._producer, None
        self._broken = False
        pending = [i for i in self._inflight if not i.done]
        self._inflight.clear()
        self._unsent.extendleft(reversed(pending))
        self.events.down()
        if producer is not None:
            await self._stop(producer)

    async def _stop(self, producer: AIOKafkaProducer) -> None:
        await bounded(producer.stop(), self.close_timeout)

    async def close(self, flush_timeout: float) -> int:
        """Send what is buffered (bounded by ``flush_timeout`` if connected), stop; events left behind.

        Returns within ``flush_timeout`` plus twice ``close_timeout``, whatever the broker does."""
        if self._task is not None and self.connected.is_set() and len(self):
            deadline = time.monotonic() + flush_timeout
            while len(self) and self.connected.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        self._closing = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            await stop_task(task, self.close_timeout)
        producer, self._producer = self._producer, None
        self.connected.clear()
        if producer is not None:
            await self._stop(producer)
        left = sum(1 for i in self._unsent if not i.done) + sum(1 for i in self._inflight if not i.done)
        for _ in range(left):
            self.events.failed()
        self._unsent.clear()
        self._inflight.clear()
        self._bytes = 0
        return left
