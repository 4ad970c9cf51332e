"""Our Kafka transport for Faust (registered as the ``loopwarden://`` driver in pyproject's
``faust.transports`` entry points): our fetch wait, end offsets Tansu gets right, batch hand-over.

Private Faust/aiokafka names used here (faust-streaming < 0.16, aiokafka < 0.15; checked by
tests/internals/test_internals_contract.py): ``AIOKafkaConsumer._fetch_max_wait_ms``,
``AIOKafkaConsumerThread._create_worker_consumer`` / ``_highwaters``, ``Consumer._drain_messages`` /
``_wait_next_records`` / ``_buffered_partitions`` / ``_to_message`` / ``_read_offset`` / ``_unacked_messages`` /
``_add_gap`` / ``_commit_every`` / ``_n_acked`` / ``_stopped`` / ``_acked`` / ``_acked_index`` /
``_committed_offset`` / ``_waiting_for_ack`` / ``_is_changelog_tp`` / ``_thread``,
``AIOKafkaConsumerThread._consumer`` / ``verify_event_path``, ``Fetcher._stopped``; ``ack()``'s lock,
``faust.types.tuples.ack_lock``; and the monitor's ``stream_inbound_time`` (read by Faust's stall check).

Fixes over Faust's aiokafka driver:

- Faust hard-codes ``fetch_max_wait_ms=1500``; Tansu sleeps about half of
  it after each fetch, so event->verdict latency is ~1 s. The consumer
  here takes the wait from the ``fetch_wait_ms`` setting.
- Tansu answers ``ListOffsets(LATEST)`` with "first offset of the last
  record batch + 1", not the log end; changelog recovery that trusts it
  stops early and silently loses table updates. After asking end offsets
  we fetch once from ``end - 1`` and take the Fetch response's high
  watermark when it is larger. On real Kafka the two agree: a no-op.
- Faust "pauses" a partition only in its own bookkeeping; aiokafka goes on
  fetching it. An active table's changelog stays paused after recovery, so
  the worker's own first state writes come back in a fetch that nobody
  reads, and aiokafka then holds back every fetch from that broker for its
  prefetch backoff (100 ms): a stall of all verdicts after each
  assignment's first flush. Pausing and resuming changelog partitions is
  mirrored into aiokafka here, so they are not fetched while Faust does
  not read them.
- Faust's stall check (every 2.5 commit intervals; ``stream_processing_timeout``)
  logs an error for a partition with records waiting that its stream has
  not started on, and for one never fetched. The batch route bypasses the
  stream and the paused changelogs are never fetched, so both fired
  forever on a healthy worker: each turn of the batch route's fetch loop
  stamps the inbound time of the partitions it is taking records of (what
  Faust's stream stamps per event), and partitions paused here on
  purpose are left out of the check. A batch route that stops taking
  records, or a partition not fetched, is still reported.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import aiokafka
import msgspec
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.tuples import ack_lock
from mode.utils.futures import notify

from loopwarden.kafka.connection import kafka_auth, servers
from loopwarden.kafka.records import unreadable

log = logging.getLogger(__name__)


async def corrected_end_offsets(
    probe: aiokafka.AIOKafkaConsumer, ends: Mapping[Any, int], timeout: float = 5.0
) -> dict[Any, int]:
    """Raise each end offset to the high watermark of a fetch from ``end - 1``.

    ``probe`` is a started, group-less consumer used only for this.
    """
    result = dict(ends)
    wanted = {tp: end for tp, end in ends.items() if end and end > 0}
    if not wanted:
        return result
    kafka_tps = {tp: aiokafka.TopicPartition(tp.topic, tp.partition) for tp in wanted}
    probe.assign(list(kafka_tps.values()))
    for tp, ktp in kafka_tps.items():
        probe.seek(ktp, wanted[tp] - 1)
    deadline = time.monotonic() + timeout
    pending = set(wanted)
    while pending and time.monotonic() < deadline:
        await probe.getmany(*[kafka_tps[tp] for tp in pending], timeout_ms=100)
        for tp in list(pending):
            high = probe.highwater(kafka_tps[tp])
            if high is not None:
                if high > result[tp]:
                    result[tp] = high
                pending.discard(tp)
    probe.assign([])
    return result


def probe_kwargs(settings: Any) -> dict[str, Any]:
    """The end-offset probe's client arguments: the worker's brokers and its TLS/SASL settings."""
    return dict(
        bootstrap_servers=servers(settings.brokers),
        enable_auto_commit=False,
        fetch_max_wait_ms=20,
        client_id="loopwarden-end-probe",
        **kafka_auth(settings),
    )


def collect(batch: list, offsets: dict[TP, list[int]], tp: TP, records: list) -> None:
    """Add ``records`` of ``tp`` to a batch and to its offsets to ack. A partition may come more
    than once per batch (while flow is paused Faust hands over one message at a time)."""
    if records:
        batch.extend(records)
        offsets.setdefault(tp, []).extend(record.offset for record in records)


def batch_durable(consumer: Any, durable: Any) -> bool:
    """Whether a batch's future says it is durable (ack it then). A failed batch stops the worker,
    its records unacked (redelivered after the restart); a cancelled one means it is stopping."""
    if durable.cancelled():
        return False
    exc = durable.exception()
    if exc is not None:
        log.error("batch failed, stopping: %r", exc)
        asyncio.ensure_future(consumer.crash(exc))
        return False
    return True


class ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread with our fetch wait and corrected high waters."""

    _probe: aiokafka.AIOKafkaConsumer | None = None

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        # Read by AIOKafkaConsumer.start() when it builds its Fetcher.
        consumer._fetch_max_wait_ms = int(self.app.worker_settings.fetch_wait_ms)
        return consumer

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        ends = await super()._highwaters(partitions)
        settings = self.app.worker_settings
        if self.consumer.in_transaction or not settings.correct_end_offsets:
            return ends
        if self._probe is None:
            self._probe = aiokafka.AIOKafkaConsumer(**probe_kwargs(settings))
            await self._probe.start()
        return await corrected_end_offsets(self._probe, ends)

    async def on_thread_stop(self) -> None:
        await super().on_thread_stop()
        if self._probe is not None:
            await self._probe.stop()
            self._probe = None

    def fetch_paused(self, tps: Any, paused: bool) -> None:
        """Pause (or resume) fetching ``tps`` in aiokafka, on this thread's loop, in call order."""
        tps = [aiokafka.TopicPartition(tp.topic, tp.partition) for tp in tps]
        if tps and self.thread_loop.is_running():
            self.thread_loop.call_soon_threadsafe(self._set_fetch_paused, tps, paused)

    def _set_fetch_paused(self, tps: list[aiokafka.TopicPartition], paused: bool) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        assigned = consumer.assignment()  # a rebalance may have taken some since the call
        mine = [tp for tp in tps if tp in assigned]
        (consumer.pause if paused else consumer.resume)(*mine)

    def verify_event_path(self, now: float, tp: TP) -> None:
        """Faust's stall check of one partition, except a changelog we paused on purpose."""
        if aiokafka.TopicPartition(tp.topic, tp.partition) in self.not_fetched():
            return None
        return super().verify_event_path(now, tp)

    def not_fetched(self) -> set[aiokafka.TopicPartition]:
        """Assigned partitions aiokafka does not fetch now (read from another thread: a status)."""
        consumer = self._consumer
        try:
            return set() if consumer is None else consumer.paused()
        except RuntimeError:  # the assignment changed under the read (a rebalance): nothing to report
            return set()


class BatchRoute(msgspec.Struct, frozen=True):
    """The hand-over from the app to :class:`Consumer`: records of ``topic`` go to ``handler``.

    ``await handler(records)`` takes one fetch's records of the topic (aiokafka records:
    ``topic``, ``partition``, ``offset``, ``key``, ``value``) and returns a future that is done once
    the batch is durable; only then are the records acked.
    """

    topic: str
    handler: Callable[[list], Awaitable[asyncio.Future[None]]]


@runtime_checkable
class RoutesBatches(Protocol):
    """An app whose consumer takes the batch route (``None``: Faust's per-record path)."""

    batch_route: BatchRoute | None


def batch_route(app: Any) -> BatchRoute | None:
    """The app's batch route, or None for an app that sets none (Faust's own path)."""
    route = app.batch_route if isinstance(app, RoutesBatches) else None
    if route is not None and not isinstance(route, BatchRoute):
        raise TypeError(f"batch_route must be a BatchRoute, not {type(route).__name__}")
    return route


class Consumer(faust_aiokafka.Consumer):
    """Faust's consumer; records of one topic go to a batch handler, not one by one to a stream.

    Faust hands every record to its stream machinery separately (two tasks
    per record in the fetch loop, a loop turn per event in the stream):
    about 2.5k events/s here even with an agent that does nothing. When the
    app sets ``batch_route`` (a :class:`BatchRoute`), each fetch's records of its
    topic go to its handler as one list; the handler returns a future that is
    done when the batch is durable, and only then are the records acked, into
    Faust's own consumer bookkeeping, so offset commits, rebalances (wait for
    unacked messages) and recovery work as before. Records of other topics (changelogs for standbys) take Faust's
    normal path.
    """

    unreadable = 0  # marks of unreadable records skipped on changelogs

    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def pause_partitions(self, tps: Any) -> None:
        tps = list(tps)
        super().pause_partitions(tps)
        self._thread.fetch_paused([tp for tp in tps if self._is_changelog_tp(tp)], True)

    def resume_partitions(self, tps: Any) -> None:
        tps = list(tps)
        super().resume_partitions(tps)
        self._thread.fetch_paused([tp for tp in tps if self._is_changelog_tp(tp)], False)

    def not_fetched(self) -> list[str]:
        """``topic/partition`` of the assigned partitions the client does not fetch (changelogs
        Faust does not read), for the worker's status page."""
        return sorted(f"{tp.topic}/{tp.partition}" for tp in self._thread.not_fetched())

    async def _drain_messages(self, fetcher: Any) -> None:
        """The fetch loop; its cancellation by a stopping worker is a clean end.

        Faust's fetcher task treats a cancellation during a rebalance as a crash to restart from:
        it logs ``Crashed reason=CancelledError()`` with a traceback, then fails on its missing
        supervisor (``'NoneType' object has no attribute 'wakeup'``). A worker stopped (SIGTERM)
        while its group rebalances (another worker just left) went down that way.
        """
        try:
            return await self._drain(fetcher)
        except asyncio.CancelledError:
            if fetcher.should_stop:
                return None
            raise

    async def _drain(self, fetcher: Any) -> None:
        route = batch_route(self.app)
        if route is None:
            return await super()._drain_messages(fetcher)
        topic, handler = route.topic, route.handler
        consumer_stopped = self._stopped.is_set
        fetcher_stopped = fetcher._stopped.is_set
        acks_enabled = self.app.topics.acks_enabled_for(topic)
        while not (consumer_stopped() or fetcher_stopped()):
            batch: list = []
            offsets: dict[TP, list[int]] = {}
            async for tp, records in self._fetched(1.0, topic):
                collect(batch, offsets, tp, await self._unread(tp, records, acks_enabled))
            if batch:
                # Faust reads its unacked set only as "is anything in flight?" (a rebalance waits
                # until it is empty). One message per batch, made from its last record and acked
                # after the rest, keeps that true until the whole batch is durable, without a
                # Faust message or a WeakSet entry per record.
                unacked = self._unacked_messages
                last = batch[-1]
                sentinel = self._to_message(TP(last.topic, last.partition), last)
                unacked.add(sentinel)
                try:
                    durable = await handler(batch)
                except BaseException:
                    unacked.discard(sentinel)  # not acked: redelivered after a seek or restart
                    raise
                durable.add_done_callback(functools.partial(self._on_batch_durable, offsets, sentinel))
            await asyncio.sleep(0)

    async def _unread(self, tp: TP, records: list, acks_enabled: bool) -> list:
        """The records of ``tp`` not read before, in order; offset gaps noted as Faust does.

        Faust drops a record below the partition's read offset (already read) and registers the
        offsets it skips (compaction, transaction markers) as a gap, so commits can pass them.
        The usual fetch is contiguous and follows the last one: checked once, not per record.
        """
        read_offset = self._read_offset
        last = read_offset[tp]
        first = records[0].offset
        if last is None or (first == last + 1 and records[-1].offset - first == len(records) - 1):
            read_offset[tp] = records[-1].offset
            return records
        kept = []
        for record in records:
            offset = record.offset
            if last is not None and offset < last:
                continue  # already read (Faust drops these too)
            if last is not None and offset - last > 1 and acks_enabled:
                await self._add_gap(tp, last + 1, offset)
            kept.append(record)
            read_offset[tp] = last = offset
        return kept

    async def _fetched(self, timeout: float, topic: str) -> Any:
        """Faust's ``getmany()`` for one fetch, yielding ``(tp, records)`` of ``topic`` as aiokafka
        gave them; records of other topics (changelogs of standby tables) go to Faust's callback.

        Faust's own generator makes a message per record and does its high-water lookup, monitor
        call, generation and flow checks per record: ~5 us of the worker's time per event; here
        they are done once per partition. While flow is paused, Faust's path (it seeks back) is taken.
        """
        if not self.flow_active:
            async for tp, message in self.getmany(timeout=timeout):
                if message.topic == topic:
                    yield tp, [message]
                else:
                    await self._to_callback(tp, message)
            return
        records, active = await self._wait_next_records(timeout)
        if active:
            # The batch route takes this topic's active partitions now: what Faust's stall check reads
            # as its stream's progress (stale once a batch hangs, or the fetch loop stops coming here).
            inbound = self.app.monitor.stream_inbound_time
            stamp = time.monotonic()
            for tp in active:
                if tp.topic == topic:
                    inbound[tp] = stamp
        if records is None or self.should_stop:
            return
        generation = self.app.consumer_generation_id
        track = self.app.monitor.track_tp_end_offset
        buffered = self._buffered_partitions
        for tp, recs in records.items():
            if not self.flow_active or self.app.consumer_generation_id != generation:
                return  # as Faust: stop handing out records of an old generation or paused flow
            if active is not None and tp not in active and tp not in buffered:
                continue
            track(tp, self.highwater(tp))
            if not recs:
                continue
            if tp.topic == topic:
                yield tp, recs
            else:
                for record in recs:
                    await self._to_callback(tp, self._to_message(tp, record))

    async def _to_callback(self, tp: TP, message: Any) -> None:
        """A record outside the batch route: Faust's own per-message path.

        The mark of an unreadable record (:mod:`loopwarden.internals.aiokafka_records`) on a
        changelog is skipped here (Faust would raise on a changelog entry without a key; changelog
        offsets are not committed); on the fleet topics it goes to the agent, which skips and acks it.
        """
        last = self._read_offset[tp]
        if last is not None and message.offset < last:
            return
        if self._is_changelog_tp(tp) and unreadable(message.key, message.value, message.headers) is not None:
            self.unreadable += 1
            log.error("unreadable changelog record at %s:%s skipped", tp, message.offset)
            self._read_offset[tp] = message.offset
            return
        await self.wait_first(self.callback(message), self.suspend_flow.wait())
        self._read_offset[tp] = message.offset

    def _ack_offsets(self, offsets: dict[TP, list[int]]) -> None:
        """Faust's ``ack()`` for many records at once: the same bookkeeping (acked offsets per
        partition, their index, the acked count) in one step per partition instead of one call
        with a lock per record."""
        if not self.app.topics.acks_enabled_for(next(iter(offsets)).topic):
            return
        with ack_lock:
            for tp, batch in offsets.items():
                committed = self._committed_offset[tp]
                index = self._acked_index[tp]
                fresh = [o for o in batch if (committed is None or o >= committed) and o not in index]
                index.update(fresh)
                self._acked[tp].extend(fresh)
                self._n_acked += len(fresh)
            notify(self._waiting_for_ack)

    def _on_batch_durable(self, offsets: dict[TP, list[int]], sentinel: Any, durable: Any) -> None:
        """Ack a batch once its verdicts and state are durable; a failed batch stops the worker."""
        if not batch_durable(self, durable):
            self._unacked_messages.discard(sentinel)  # not acked: redelivered after a restart
            return
        self._ack_offsets(offsets)
        sentinel.acked = True  # last: the batch leaves the unacked set once all of it is acked
        self._unacked_messages.discard(sentinel)
        commit_every = self._commit_every
        if commit_every is not None and self._n_acked >= commit_every:
            self._n_acked = 0
            asyncio.ensure_future(self.commit())


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer
