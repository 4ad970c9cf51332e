"""The Faust app factory: topics, the run table, the agent, HTTP pages and timers.

Everything is built inside :func:`create_app` from :class:`Settings` (no
module-level app), so tests and ``loopwarden dev`` can make several. It reads
as its steps: the app, its topics and tables, the runtime its parts share
(:class:`Runtime`), the batch route, the periodic tasks, the web pages.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any

import faust

from loopwarden.internals.aiokafka_records import install as install_parse_guard
from loopwarden.internals.faust_consumer import BatchRoute, batch_durable
from loopwarden.internals.faust_table import fetcher_service
from loopwarden.internals.faust_worker import Worker as FaustWorker
from loopwarden.kafka.configfeed import ConfigFeed
from loopwarden.kafka.connection import kafka_auth, password, protocol, servers, ssl_context
from loopwarden.kafka.producer import RecordProducer
from loopwarden.schemas.config import FleetConfig
from loopwarden.worker.committer import Committer
from loopwarden.worker.fleet_agent import install as install_fleet
from loopwarden.worker.health import Health, StallExit, Watchdog
from loopwarden.worker.logs import setup_logging
from loopwarden.worker.metrics import CONTENT_TYPE_LATEST, Metrics
from loopwarden.worker.processor import RunProcessor
from loopwarden.worker.runtable import RunTable
from loopwarden.worker.settings import Settings
from loopwarden.worker.trust import config_verifier, incident_verifier, signer

TABLE_NAME = "runs"
log = logging.getLogger("loopwarden.worker")


TRANSPORT_SCHEME = "loopwarden"  # our driver in Faust's transport registry (pyproject entry point)


class Worker(FaustWorker):
    """The worker class Faust starts: loopwarden's one log format (:mod:`loopwarden.worker.logs`)."""

    setup_logging = staticmethod(setup_logging)


class LoopwardenApp(faust.App):
    """A Faust app that carries the worker's settings for our transport and the batch route."""

    worker_settings: Settings
    batch_route: BatchRoute | None = None  # that topic's records go to its handler a fetch at a time
    record_producer: RecordProducer | None = None  # verdicts and dead letters, apart from the changelog
    committer: Committer | None = None
    stall_exit: StallExit | None = None  # armed by the heartbeat; still armed while stopping (a hung stop exits)

    async def on_stop(self) -> None:
        log.info("stopping: writing pending state, then leaving the group")
        if self.committer is not None:
            # Faust's stop waits until every batch is acked, and a batch is acked once its state
            # flush is done: write it now instead of after the flush interval.
            self.committer.flush_now(always=True)
        await super().on_stop()  # Faust's: the consumer, then its producer (changelog) flushed
        if self.record_producer is not None:
            await self.record_producer.stop()
        if self.stall_exit is not None:
            self.stall_exit.stop()


def ack_when_durable(consumer: Any, events: list, durable: asyncio.Future[None]) -> None:
    """Ack a batch's Faust events once its verdicts and state are durable (the fast path's rule)."""
    if batch_durable(consumer, durable):
        for event in events:
            event.ack()


@dataclass
class Runtime:
    """What the agent, pages and timers of one app share."""

    settings: Settings
    metrics: Metrics
    feed: ConfigFeed
    table: RunTable
    processor: RunProcessor
    health: Health
    was_ready: bool = False
    counted_generation: int | None = None  # the consumer group generation of the run counts

    def assigned(self, app: faust.App) -> set[int]:
        topic = self.settings.events_topic
        return {tp.partition for tp in app.consumer.assignment() if tp.topic == topic}

    def observe(self, app: faust.App) -> dict[str, Any]:
        """:meth:`status`, exported as ``loopwarden_ready`` and logged when readiness changes
        (the first time, and again after a rebalance took it away)."""
        status = self.status(app)
        self.metrics.ready.set(1 if status["ready"] else 0)
        if status["ready"] != self.was_ready:
            self.was_ready = status["ready"]
            if self.was_ready:
                log.info("ready: events partitions %s", ",".join(map(str, status["partitions"])))
            else:
                log.info("not ready: %s", ", ".join(k for k, ok in status["checks"].items() if not ok))
        return status

    def status(self, app: faust.App) -> dict[str, Any]:
        recovery = app.tables.recovery
        assigned = self.assigned(app)
        checks = {
            "partitions_assigned": bool(assigned),
            "recovery_done": recovery.completed.is_set() and not recovery.in_recovery,
            "not_rebalancing": not app.rebalancing,
            "config_loaded": self.feed.loaded.is_set(),
        }
        return {
            "ready": all(checks.values()),
            "checks": checks,
            "partitions": sorted(assigned),
            "not_fetched": app.consumer.not_fetched(),
        }  # changelogs Faust does not read now


def faust_credentials(s: Any):
    """Faust ``broker_credentials`` for these settings, or None for PLAINTEXT."""
    proto = protocol(s)
    if proto == "PLAINTEXT":
        return None
    if proto == "SSL":
        return faust.SSLCredentials(ssl_context(s))
    return faust.SASLCredentials(
        username=s.sasl_username,
        password=password(s),
        ssl_context=ssl_context(s) if proto == "SASL_SSL" else None,
        mechanism=s.sasl_mechanism.upper(),
    )


def create_app(settings: Settings, fleet: FleetConfig | None = None) -> tuple[LoopwardenApp, Runtime]:
    """The worker's Faust app and what its parts share, built in this order."""
    install_parse_guard()  # a record aiokafka cannot parse is a mark, not an exception (every reader here)
    app = new_app(settings)
    events, table = add_topics_and_tables(app, settings)
    rt = build_runtime(app, settings, table, fleet)
    add_batch_route(app, rt, events)
    add_periodic_tasks(app, rt)
    add_pages(app, rt)
    return app, rt


def new_app(s: Settings) -> LoopwardenApp:
    """The Faust app, configured from the settings (no topic, table or agent yet)."""
    app = LoopwardenApp(
        s.app_id,
        broker=[f"{TRANSPORT_SCHEME}://{server}" for server in servers(s.brokers)],
        Worker="loopwarden.worker.app:Worker",
        store=s.store,
        datadir=s.data_dir,
        autodiscover=False,
        processing_guarantee=s.processing_guarantee,
        web_enabled=True,
        # Faust's /table pages serve any run's state by key, /router names the worker owning a key:
        # neither is needed, both expose. /metrics, /healthz and /readyz are ours (add_pages).
        web_tables_enabled=False,
        web_router_enabled=False,
        web_bind=s.host,
        web_host=s.host,
        web_port=s.port,
        producer_linger_ms=s.linger_ms,
        broker_session_timeout=s.session_timeout,
        broker_heartbeat_interval=s.heartbeat_interval,
        consumer_group_instance_id=s.group_instance_id,
        table_standby_replicas=s.standby_replicas,
        stream_processing_timeout=s.partition_stall_timeout,
        broker_commit_interval=s.commit_interval,
        topic_partitions=s.partitions,
        topic_replication_factor=s.replicas,
        consumer_auto_offset_reset="earliest",
        stream_buffer_maxsize=max(4096, 2 * s.batch_max),
        broker_max_poll_records=s.batch_max,
        consumer_max_fetch_size=max(4 * 1024 * 1024, 2 * s.max_message_bytes),
        producer_max_request_size=s.producer_max_request_size,
        broker_credentials=faust_credentials(s),
    )
    app.worker_settings = s
    if getattr(app.conf, "web_tables_enabled", True) or getattr(app.conf, "web_router_enabled", True):
        raise RuntimeError("this Faust cannot turn off its /table and /router pages: upgrade faust-streaming")
    return app


def add_topics_and_tables(app: LoopwardenApp, s: Settings) -> tuple[Any, Any]:
    """The events topic (raw bytes: the batch step parses and screens them) and the run table."""
    events = app.topic(
        s.events_topic,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        partitions=s.partitions,
    )
    table = app.Table(
        TABLE_NAME,
        default=None,
        key_type=bytes,
        value_type=bytes,  # bytes = raw serializer
        partitions=s.partitions,
        options=s.rocksdb_options,
    )
    return events, table


def build_runtime(app: LoopwardenApp, s: Settings, table: Any, fleet: FleetConfig | None) -> Runtime:
    """The config feed, the producers, the batch processor, health and the fleet extensions."""
    metrics = Metrics(s.tool_label_set)
    signer_ = signer(s)
    feed = ConfigFeed(
        fleet or FleetConfig(),
        s.bootstrap,
        s.config_topic,
        on_update=metrics.config_updates.inc,
        client_kwargs=kafka_auth(s),
        on_ignored=metrics.config_ignored.inc,
        verifier=config_verifier(s),
        on_rejected=metrics.signature_rejected.labels("config").inc,
        on_refused=lambda reason: metrics.config_refused.labels(reason).inc(),
    )

    async def send(topic: str, key: bytes | None, value: bytes | None, partition: int | None = None) -> Any:
        headers = signer_.headers(topic, key, value) if signer_ is not None else None  # incidents, cross-run
        return await app.producer.send(topic, key, value, partition, None, headers)

    runtable = RunTable(table, s.events_topic, send)  # the changelog: Faust's producer
    app.record_producer = RecordProducer(s, signer=signer_)
    processor = RunProcessor(s, metrics, runtable, app.record_producer.send, lambda: feed.fleet)
    health = Health(
        s.stall_timeout,
        lambda: {"app": app, "consumer": app.consumer, "producer": app.producer, "fetcher": fetcher_service(app)},
    )
    fleet_rt = install_fleet(
        app,
        s,
        metrics,
        lambda: feed.fleet,
        send,
        lambda: {tp.partition for tp in app.consumer.assignment() if tp.topic == s.fleet_topics[0]},
    )
    fleet_rt.verifier = incident_verifier(s, signer_)
    processor.hooks = fleet_rt.hooks
    app.committer = processor.committer
    app.loopwarden_fleet = fleet_rt  # the dev view reads open incidents here
    app.stall_exit = StallExit(s.stall_exit_after)
    return Runtime(s, metrics, feed, runtable, processor, health)


def add_batch_route(app: LoopwardenApp, rt: Runtime, events: Any) -> None:
    """The agent on the events topic and, on the fast path, the batch route the consumer hands
    each fetch's records to (:class:`loopwarden.internals.faust_consumer.BatchRoute`)."""
    s, feed, processor = rt.settings, rt.feed, rt.processor

    @app.agent(events, name="loopwarden.runs")
    async def runs(stream: Any) -> None:
        await feed.loaded.wait()
        if s.fast_path:
            # The consumer hands this topic's records to process_batch directly and nothing arrives
            # here; the agent holds the subscription. Plain iteration sleeps until a record comes
            # (none does; one would still be processed), where take_events() would wake every
            # batch_within, 200 times a second, to find none.
            async for event in stream:
                await (await processor.process([event.message]))
            return
        # Faust's per-message stream (--no-fast-path). Its events are acked once their batch is
        # durable, not when the next batch is taken, so the stream never waits for a state flush.
        async for batch in stream.noack_take(s.batch_max, within=s.batch_within):
            durable = await processor.process([event.message for event in batch])
            durable.add_done_callback(functools.partial(ack_when_durable, app.consumer, batch))

    async def process_batch(messages: list) -> asyncio.Future[None]:
        if not feed.loaded.is_set():
            await feed.loaded.wait()
        return await processor.process(messages)

    if s.fast_path:
        app.batch_route = BatchRoute(s.events_topic, process_batch)


def add_periodic_tasks(app: LoopwardenApp, rt: Runtime) -> None:
    """The heartbeat, the watchdog, the config feed, the health gauges and the expiry sweep."""
    s, metrics, health, processor = rt.settings, rt.metrics, rt.health, rt.processor
    stall = app.stall_exit

    @app.timer(min(1.0, s.stall_timeout / 4))
    async def heartbeat() -> None:
        health.beat()
        if stall is not None:
            stall.beat()

    @app.task
    async def watchdog() -> None:
        dog = Watchdog(health, s.unhealthy_exit_after)
        dog.start()

    @app.task
    async def config_feed() -> None:
        await rt.feed.run()

    sweeping: list[asyncio.Task] = []  # the one sweep running, if any

    async def sweep() -> None:
        if sweeping and not sweeping[0].done():
            return
        sweeping[:] = [asyncio.ensure_future(processor.expire(rt.assigned(app)))]  # takes the batch lock in chunks
        await sweeping[0]

    @app.timer(1.0)
    async def health_gauges() -> None:
        status = rt.observe(app)
        metrics.assigned_partitions.set(len(status["partitions"]))
        owned = set(status["partitions"])
        if app.consumer_generation_id != rt.counted_generation:  # a rebalance since the last count
            rt.counted_generation = app.consumer_generation_id
            processor.recount()
        metrics.active_runs.set(processor.active_runs(owned))
        if status["ready"] and processor.uncounted(owned) and not (sweeping and not sweeping[0].done()):
            # Partitions just assigned hold runs no sweep has counted: count them now, not at the next sweep.
            asyncio.ensure_future(sweep())
        metrics.consumer_lag.clear()
        for tp in app.consumer.assignment():
            if tp.topic != s.events_topic:
                continue
            try:
                high = app.consumer.highwater(tp)
            except Exception:  # consumer not started or partition just revoked
                continue
            seen = processor.positions.get(tp.partition)
            if high is not None and seen is not None:
                metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(max(0, high - seen - 1))

    @app.timer(s.expire_interval)
    async def expire_runs() -> None:
        if app.rebalancing:
            return
        await sweep()


def add_pages(app: LoopwardenApp, rt: Runtime) -> None:
    """/metrics, /healthz and /readyz."""
    metrics, health = rt.metrics, rt.health

    @app.page("/metrics")
    async def metrics_page(web: Any, request: Any) -> Any:
        return web.bytes(metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        health.beat()  # the loop answers this request, so it is not stalled now
        status, body = health.report()
        return web.json(body, status=status)

    @app.page("/readyz")
    async def readyz(web: Any, request: Any) -> Any:
        status = rt.observe(app)
        return web.json(status, status=200 if status["ready"] else 503)
