"""The verdict listener: one group-less consumer on every partition of the control topic.

Why no consumer group: each runner process must see the verdicts of *its*
runs, and a run's partition is fixed by its key (chosen by the worker's
producer), not by the runner. A shared group would split partitions across
runners so most of them would miss their own verdicts; a unique group per
process would work but costs a group join (Tansu holds joins for
``session_timeout/2``, streams/ARCHITECTURE.md, "Tansu"), heartbeats and offset commits
that a listener starting "from now" never uses. So: ``assign()`` all
partitions, seek to the end, drop what belongs to unregistered runs.
Cost: every runner reads every verdict (small JSON records); a very large
fleet can shard control topics per runner pool.

With verdict keys configured (``ClientSettings.verdict_keys``), a record of
one of this runner's runs whose signature (header ``lw-sig``) is missing or
does not verify is dropped before decoding and counted (``on_rejected``):
whoever can write the control topic cannot block, abort or warn a run.

Starting "at the end" on Tansu may start a few records early (its
``ListOffsets(LATEST)`` points at the start of the last batch, streams/ARCHITECTURE.md, "Tansu"); those
are old verdicts of runs nobody here registered, so they are dropped.
The start offsets are resolved before :meth:`start` returns, so a gate
check published afterwards cannot have its verdict skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from loopwarden.internals.aiokafka_client import cancel_fetch_tasks, close_connections, fetch_all_metadata
from loopwarden.internals.aiokafka_records import install as install_parse_guard
from loopwarden.kafka.connection import kafka_auth
from loopwarden.kafka.signing import verifier_from
from loopwarden.runner.outbox import Outage, stop_task, wait_event
from loopwarden.runner.settings import ClientSettings
from loopwarden.schemas.verdicts import Verdict, VerdictViolation

log = logging.getLogger(__name__)

# handler(record_key, verdict); called on the event loop, must not block
Handler = Callable[[bytes | None, Verdict], None]


class VerdictListener:
    def __init__(
        self,
        settings: ClientSettings,
        handler: Handler,
        on_undecodable: Callable[[], None],
        wants: Callable[[bytes], bool] | None = None,
        on_foreign: Callable[[], None] | None = None,
        on_rejected: Callable[[], None] | None = None,
    ) -> None:
        # settings not resolved by a client (fetch wait unset): the gate's, which a waiting check needs
        self.settings = settings if settings.fetch_wait_ms is not None else settings.for_mode(local=False)
        self.handler = handler
        self.on_undecodable = on_undecodable
        # The control topic carries the whole fleet's verdicts: a record keyed by a run this runner
        # does not watch is dropped on its key, before decoding (``on_foreign`` counts it).
        self.wants = wants
        self.on_foreign = on_foreign
        self.on_rejected = on_rejected
        self.verifier = verifier_from(settings.verdict_keys, settings.verdict_keys_file)  # read once, at start
        self.ready = asyncio.Event()
        self.outage = Outage("verdict listener", settings.outage_log_interval)
        self._attempted = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task | None = None
        self._closing = False  # the loops end on it even if a cancel is lost (loopwarden.runner.outbox)
        # verdict_violation records share the topic; they are for operators: skipped, not "undecodable"
        self._decoder = msgspec.json.Decoder(Verdict | VerdictViolation)

    async def start(self) -> None:
        """Begin listening in the background; never raises for a broker that is down.

        If the broker answers, waits up to ``start_timeout`` for the control
        topic to be positioned on (so a check published afterwards cannot have
        its verdict skipped); if it does not, returns at once and connects by
        itself whenever the broker comes up (checks meanwhile fail open).
        """
        s = self.settings
        install_parse_guard()  # a record aiokafka cannot parse is a mark (no value: undecodable), not a crash
        self._task = asyncio.create_task(self._run(), name="loopwarden-verdicts")
        if not await wait_event(self._attempted, s.request_timeout_ms / 1000) or self._consumer is None:
            return  # the broker is down: connecting goes on in the background
        if not await wait_event(self.ready, s.start_timeout):
            log.warning(
                "control topic %s not available after %.1fs; gate checks fail open until it is",
                s.control_topic,
                s.start_timeout,
            )

    def _make_consumer(self) -> AIOKafkaConsumer:
        s = self.settings
        return AIOKafkaConsumer(
            bootstrap_servers=s.servers,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="latest",
            fetch_max_wait_ms=s.fetch_wait_ms,
            request_timeout_ms=max(s.request_timeout_ms, 2 * s.fetch_wait_ms + 1000),
            client_id=f"{s.client_id}-verdicts",
            **kafka_auth(s),
        )

    async def _connect(self) -> None:
        """Start a consumer, retrying with back-off until the broker answers."""
        backoff = 0.1
        while not self._closing:
            consumer = self._make_consumer()
            try:
                async with asyncio.timeout(self.settings.request_timeout_ms / 1000):
                    await consumer.start()
            except Exception as exc:  # noqa: BLE001 - broker down: keep trying, checks fail open meanwhile
                self.outage.failed(exc)
                self._attempted.set()
                await stop_consumer(consumer, self.settings.close_timeout)
                await asyncio.sleep(backoff)
                backoff = min(self.settings.reconnect_backoff_max, backoff * 2)
                continue
            self._consumer = consumer
            self.outage.recovered()
            self._attempted.set()
            return

    async def _assign(self) -> None:
        consumer, topic = self._consumer, self.settings.control_topic
        assert consumer is not None
        while True:
            try:
                cluster = await fetch_all_metadata(consumer)
                partitions = cluster.partitions_for_topic(topic)
            except Exception as exc:  # noqa: BLE001 - broker down or restarting: keep trying
                log.debug("metadata for %s: %r", topic, exc)
                partitions = None
            if partitions:
                break
            if self._closing:
                return
            await asyncio.sleep(0.2)
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:
            await consumer.position(tp)  # resolve now, not lazily at the first fetch
        self.ready.set()

    async def _run(self) -> None:
        if self._consumer is None:
            await self._connect()
        consumer = self._consumer
        if consumer is None:  # closing
            return
        while not self.ready.is_set() and not self._closing:
            try:
                await self._assign()
            except Exception as exc:  # noqa: BLE001
                self.outage.failed(exc)
                await asyncio.sleep(0.5)
        self.outage.recovered()
        decode, handler, wants, on_foreign = self._decoder.decode, self.handler, self.wants, self.on_foreign
        verify = self.verifier.verify if self.verifier is not None else None
        backoff = 0.05
        while not self._closing:
            try:
                batches = await consumer.getmany(timeout_ms=1000, max_records=2000)
                if backoff != 0.05:
                    self.outage.recovered()
                backoff = 0.05
            except Exception as exc:  # noqa: BLE001 - never let the listener die: gates would only ever time out
                self.outage.failed(exc)
                await asyncio.sleep(backoff)
                backoff = min(2.0, backoff * 2)
                continue
            for records in batches.values():
                for record in records:
                    if record.value is None:  # never a verdict (and the mark of an unreadable record)
                        self.on_undecodable()
                        continue
                    if wants is not None and record.key is not None and not wants(record.key):
                        if on_foreign is not None:
                            on_foreign()
                        continue
                    if verify is not None and not verify(record.topic, record.key, record.value, record.headers):
                        if self.on_rejected is not None:
                            self.on_rejected()
                        continue
                    try:
                        verdict = decode(record.value)
                    except (msgspec.DecodeError, TypeError, RecursionError):  # nesting: msgspec's bound
                        self.on_undecodable()
                        continue
                    if type(verdict) is Verdict:
                        handler(record.key, verdict)

    async def stop(self) -> None:
        """Stop listening; returns within twice ``close_timeout`` whatever the broker does."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            await stop_task(task, self.settings.close_timeout)
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await stop_consumer(consumer, self.settings.close_timeout)


async def stop_consumer(consumer: AIOKafkaConsumer, timeout: float) -> None:
    """``consumer.stop()``, bounded, surviving an aiokafka 0.14 shutdown bug.

    With the broker gone, a fetch task sits in its retry back-off;
    ``Fetcher.close()`` cancels it and re-raises its ``CancelledError``, which
    aborts ``stop()`` before the client's connections are closed. Finish the
    job here so a runner can always shut down.
    """
    task = asyncio.ensure_future(consumer.stop())
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        log.warning("verdict consumer did not stop within %.1fs", timeout)
        return
    if task.cancelled() or task.exception() is not None:
        cancel_fetch_tasks(consumer)
        try:
            await asyncio.wait_for(close_connections(consumer), timeout)
        except (TimeoutError, KafkaError, OSError):
            log.warning("verdict consumer connections did not close cleanly")
