"""Our Kafka transport for Faust (registered as the ``loopwarden://`` driver in pyproject's
``faust.transports`` entry points): our fetch wait, end offsets Tansu gets right, batch hand-over.

Private Faust/aiokafka names used here (faust-streaming < 0.16, aiokafka < 0.15; checked by
tests/unit/test_internals_contract.py): ``AIOKafkaConsumer._fetch_max_wait_ms``,
``AIOKafkaConsumerThread._create_worker_consumer`` / ``_highwaters``, ``Consumer._drain_messages`` /
``_wait_next_records`` / ``_buffered_partitions`` / ``_to_message`` / ``_read_offset`` / ``_unacked_messages`` /
``_add_gap`` / ``_commit_every`` / ``_n_acked`` / ``_stopped``, ``Fetcher._stopped``.

Fixes over Faust's aiokafka driver:

- Faust hard-codes ``fetch_max_wait_ms=1500``; Tansu sleeps about half of
  it after each fetch, so event->verdict latency is ~1 s. The consumer
  here takes the wait from the ``fetch_wait_ms`` setting.
- Tansu answers ``ListOffsets(LATEST)`` with "first offset of the last
  record batch + 1", not the log end; changelog recovery that trusts it
  stops early and silently loses table updates. After asking end offsets
  we fetch once from ``end - 1`` and take the Fetch response's high
  watermark when it is larger. On real Kafka the two agree: a no-op.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any, Mapping

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP

from streams.kafka.connection import kafka_auth, servers

log = logging.getLogger(__name__)


async def corrected_end_offsets(probe: aiokafka.AIOKafkaConsumer, ends: Mapping[Any, int],
                                timeout: float = 5.0) -> dict[Any, int]:
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
    return dict(bootstrap_servers=servers(settings.brokers), enable_auto_commit=False, fetch_max_wait_ms=20,
                client_id="loopwarden-end-probe", **kafka_auth(settings))


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


class Consumer(faust_aiokafka.Consumer):
    """Faust's consumer; records of one topic go to a batch handler, not one by one to a stream.

    Faust hands every record to its stream machinery separately (two tasks
    per record in the fetch loop, a loop turn per event in the stream):
    about 2.5k events/s here even with an agent that does nothing. When the
    app sets ``batch_route = (topic, handler)``, each fetch's records of that
    topic go to ``await handler(messages)`` as one list; the handler returns
    a future that is done when the batch is durable, and only then are the
    messages acked, through Faust's own consumer bookkeeping, so offset
    commits, rebalances (wait for unacked messages) and recovery work as
    before. Records of other topics (changelogs for standbys) take Faust's
    normal path.
    """

    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _drain_messages(self, fetcher: Any) -> None:
        route = self.app.batch_route
        if route is None:
            return await super()._drain_messages(fetcher)
        topic, handler = route
        callback = self.callback
        read_offset = self._read_offset
        consumer_stopped = self._stopped.is_set
        fetcher_stopped = fetcher._stopped.is_set
        acks_enabled = self.app.topics.acks_enabled_for(topic)
        while not (consumer_stopped() or fetcher_stopped()):
            batch: list = []
            async for tp, message in self._fetched(1.0):
                offset = message.offset
                last = read_offset[tp]
                if last is not None and offset < last:
                    continue  # already read (Faust drops these too)
                if message.topic == topic:
                    if last is not None and offset - last > 1 and acks_enabled:
                        await self._add_gap(tp, last + 1, offset)
                    batch.append(message)
                else:
                    await self.wait_first(callback(message), self.suspend_flow.wait())
                read_offset[tp] = offset
            if batch:
                # Faust reads its unacked set only as "is anything in flight?" (a rebalance waits
                # until it is empty; ack() discards). One message per batch, the last one acked,
                # keeps that true until the whole batch is durable, without a WeakSet entry per
                # record (~2.5 % of the worker's CPU).
                unacked = self._unacked_messages
                sentinel = batch[-1]
                unacked.add(sentinel)
                try:
                    durable = await handler(batch)
                except BaseException:
                    unacked.discard(sentinel)  # not acked: redelivered after a seek or restart
                    raise
                durable.add_done_callback(functools.partial(self._on_batch_durable, batch))
            await asyncio.sleep(0)

    async def _fetched(self, timeout: float) -> Any:
        """Faust's ``getmany()`` for one fetch, yielding ``(tp, message)``, with its per-record
        work (high-water lookup, monitor call, generation and flow checks) done once per partition.

        Faust's own generator does all of that per record: ~5 us of the worker's time per event.
        Records of a partition keep their order; partitions follow one another (a batch takes
        the whole fetch anyway). While flow is paused, Faust's path (it seeks back) is taken.
        """
        if not self.flow_active:
            async for item in self.getmany(timeout=timeout):
                yield item
            return
        records, active = await self._wait_next_records(timeout)
        if records is None or self.should_stop:
            return
        generation = self.app.consumer_generation_id
        to_message = self._to_message
        track = self.app.monitor.track_tp_end_offset
        buffered = self._buffered_partitions
        for tp, recs in records.items():
            if not self.flow_active or self.app.consumer_generation_id != generation:
                return  # as Faust: stop handing out records of an old generation or paused flow
            if active is not None and tp not in active and tp not in buffered:
                continue
            track(tp, self.highwater(tp))
            for record in recs:
                yield tp, to_message(tp, record)

    def _on_batch_durable(self, batch: list, durable: Any) -> None:
        """Ack a batch once its verdicts and state are durable; a failed batch stops the worker."""
        if durable.cancelled() or durable.exception() is not None:
            self._unacked_messages.discard(batch[-1])  # the batch's sentinel; not acked: redelivered after a restart
            if not durable.cancelled():  # cancelled = the worker is stopping anyway
                log.error("batch failed, stopping: %r", durable.exception())
                asyncio.ensure_future(self.crash(durable.exception()))
            return
        for message in batch:  # in order: the sentinel (last) leaves the unacked set last
            self.ack(message)
        commit_every = self._commit_every
        if commit_every is not None and self._n_acked >= commit_every:
            self._n_acked = 0
            asyncio.ensure_future(self.commit())


class Transport(faust_aiokafka.Transport):
    Consumer = Consumer
