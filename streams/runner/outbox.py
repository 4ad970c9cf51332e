"""The runner's way to the broker: a bounded outbox, a producer that reconnects, quiet outages.

A runner must never wait for loopwarden, and never lose its protection
because the broker was down when it started. So events are not sent by the
caller: :meth:`Outbox.put` appends to a bounded buffer and returns at once;
one pump task connects (and reconnects, with back-off) and sends the
buffer in order. An event stays in the outbox until the broker confirmed
it; after a failure everything unconfirmed is sent again on the next
connection (the worker drops a repeated ``event_id``). When the buffer is
full, new events are dropped and counted (``ClientStats.events_dropped``).

:class:`Outage` words an outage for the log: its first failure, then at
most one line per ``interval`` while it lasts, and one when it ends, so a
dead broker costs a few lines, not one per retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaProducer

log = logging.getLogger(__name__)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` for ``event``; whether it is set. Leaves no waiter task behind."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    done, _ = await asyncio.wait({waiter}, timeout=timeout)
    if not done:
        waiter.cancel()
    return event.is_set()


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
    __slots__ = ("topic", "key", "value", "done")

    def __init__(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.topic = topic
        self.key = key
        self.value = value
        self.done = False


class Outbox:
    """Bounded, ordered, reconnecting event sender (one per client)."""

    def __init__(
        self,
        make_producer: Callable[[], AIOKafkaProducer],
        max_buffered: int,
        *,
        send_timeout: float,
        close_timeout: float,
        backoff_max: float = 5.0,
        log_interval: float = 60.0,
        on_sent: Callable[[], Any] | None = None,
        on_dropped: Callable[[], Any] | None = None,
        on_failed: Callable[[], Any] | None = None,
        on_down: Callable[[], Any] | None = None,
    ) -> None:
        self._make = make_producer
        self.max_buffered = max(1, max_buffered)
        self.send_timeout = send_timeout
        self.close_timeout = close_timeout
        self.backoff_max = backoff_max
        self.outage = Outage("event producer", log_interval)
        self._on_sent = on_sent
        self._on_dropped = on_dropped
        self._on_failed = on_failed
        self._on_down = on_down
        self._unsent: deque[_Item] = deque()
        self._inflight: deque[_Item] = deque()  # sent, not yet confirmed (in send order)
        self._wake = asyncio.Event()
        self._broken = False
        self.connected = asyncio.Event()
        self._producer: AIOKafkaProducer | None = None
        self._task: asyncio.Task | None = None
        self._attempted = asyncio.Event()  # set after the first connection attempt, won or lost

    def __len__(self) -> int:
        return len(self._unsent) + len(self._inflight)

    def put(self, topic: str, key: bytes | None, value: bytes) -> bool:
        """Queue one record; False (and counted) when the buffer is full. Never waits."""
        if len(self._unsent) + len(self._inflight) >= self.max_buffered:
            if self._on_dropped is not None:
                self._on_dropped()
            return False
        self._unsent.append(_Item(topic, key, value))
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
            await asyncio.wait_for(producer.start(), self.send_timeout)
        except Exception as exc:  # noqa: BLE001 - broker down, DNS, auth: all retried
            self.outage.failed(exc)
            await self._stop(producer)
            return None
        return producer

    async def _pump(self) -> None:
        backoff = 0.1
        while True:
            if self._producer is None:
                producer = await self._connect()
                self._attempted.set()
                if producer is None:
                    await asyncio.sleep(backoff)
                    backoff = min(self.backoff_max, backoff * 2)
                    continue
                backoff = 0.1
                self._producer = producer
                self._broken = False
                self.outage.recovered()
                self.connected.set()
            if self._broken:
                await self._reset()
                continue
            if not self._unsent:
                self._wake.clear()
                await self._wake.wait()
                continue
            item = self._unsent[0]
            try:
                delivery = await asyncio.wait_for(
                    self._producer.send(item.topic, item.value, key=item.key), self.send_timeout
                )
            except Exception as exc:  # noqa: BLE001 - KafkaError, timeout: the item stays at the head
                self.outage.failed(exc)
                await self._reset()
                await asyncio.sleep(backoff)
                backoff = min(self.backoff_max, backoff * 2)
                continue
            self._unsent.popleft()
            self._inflight.append(item)
            delivery.add_done_callback(lambda d, item=item: self._delivered(d, item))

    def _delivered(self, delivery: asyncio.Future, item: _Item) -> None:
        # Always read the outcome: an unread failed future logs "exception was never retrieved".
        exc = None if delivery.cancelled() else delivery.exception()
        if exc is None and not delivery.cancelled():
            if not item.done:
                item.done = True
                if self._on_sent is not None:
                    self._on_sent()
            inflight = self._inflight
            while inflight and inflight[0].done:
                inflight.popleft()
            return
        if not self._broken and self._producer is not None:
            self._broken = True
            self.outage.failed(exc or ConnectionError("delivery cancelled"))
            self._wake.set()

    async def _reset(self) -> None:
        """Drop the connection; everything unconfirmed goes back to the front, in order."""
        self.connected.clear()
        producer, self._producer = self._producer, None
        self._broken = False
        pending = [i for i in self._inflight if not i.done]
        self._inflight.clear()
        self._unsent.extendleft(reversed(pending))
        if self._on_down is not None:
            self._on_down()
        if producer is not None:
            await self._stop(producer)

    async def _stop(self, producer: AIOKafkaProducer) -> None:
        try:
            await asyncio.wait_for(producer.stop(), self.close_timeout)
        except Exception as exc:  # noqa: BLE001 - a dead broker: nothing more to do with it
            log.debug("producer stop: %r", exc)

    async def close(self, flush_timeout: float) -> int:
        """Send what is buffered (bounded by ``flush_timeout`` if connected), stop; events left behind."""
        if self._task is not None and self.connected.is_set() and len(self):
            deadline = time.monotonic() + flush_timeout
            while len(self) and self.connected.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        producer, self._producer = self._producer, None
        self.connected.clear()
        if producer is not None:
            await self._stop(producer)
        left = len(self)
        for _ in range(left):
            if self._on_failed is not None:
                self._on_failed()
        self._unsent.clear()
        self._inflight.clear()
        return left
