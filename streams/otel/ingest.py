"""``loopwarden spans``: a small consumer that turns the Collector's span topic into ``agent.events``.

Why a consumer of its own and not a Faust agent in the worker: the exporter
keys its records by nothing (or by trace id), so a request holds spans of
many runs in no useful partition. The events must be re-keyed by run
(:func:`loopwarden.schemas.events.run_key`) before the worker sees them, or a
run's calls would be spread over partitions and workers. Publishing them to
``agent.events`` does exactly that, through the path every runner uses, and
leaves the worker's batch path, its ordering and its crash safety untouched;
a span burst or a hostile request costs this process, not the worker's
event loop. It needs aiokafka and ``opentelemetry-proto`` only (extra ``otel``).

Delivery is at least once: a batch's events and dead letters are delivered
before its offsets are committed. A span read twice gives the same
``event_id`` values, which the worker drops as duplicates.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from typing import Any

import msgspec

from loopwarden.internals.aiokafka_records import install as install_parse_guard
from loopwarden.kafka.connection import SecuritySettings, kafka_auth, servers, settings_from_env, start_client
from loopwarden.kafka.records import unreadable
from loopwarden.otel.mapping import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    GAP_BARE_ARGUMENTS,
    GAP_NO_RESULT,
    Announced,
    family,
    map_spans,
    relevant,
)
from loopwarden.otel.spans import ENCODINGS, SpanDecodeError, decode_spans
from loopwarden.schemas.events import encode_event, run_key
from loopwarden.schemas.jsvalues import json_bytes
from loopwarden.schemas.verdicts import dead_letter

log = logging.getLogger(__name__)

ENV_PREFIX = "LOOPWARDEN_SPANS_"


class SpanSettings(SecuritySettings, kw_only=True):
    bootstrap: str = "127.0.0.1:9092"
    spans_topic: str = "otlp_spans"  # the Kafka exporter's default traces topic
    encoding: str = "otlp_proto"  # or otlp_json: the exporter's `traces::encoding`
    events_topic: str = "agent.events"
    dead_letter_topic: str = "loopwarden.dead-letter"
    group_id: str = "loopwarden-spans"
    start: str = "latest"  # where a new group starts: latest (monitor from now on) or earliest
    max_request_bytes: int = 8_388_608  # a record larger than this is dead-lettered (too_large)
    max_spans: int = 20_000  # spans per record; more: the record is dead-lettered
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES  # arguments/results larger: sent as a digest
    max_records: int = 500  # records per fetch
    fetch_wait_ms: int = 100
    stats_interval: float = 60.0  # seconds between log lines of counts (0: none)
    client_id: str = "loopwarden-spans"

    def check(self) -> SpanSettings:
        """Raise ValueError for settings that cannot work (checked before the first fetch)."""
        if self.encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, not {self.encoding!r}")
        if self.start not in ("latest", "earliest"):
            raise ValueError(f"start must be latest or earliest, not {self.start!r}")
        if min(self.max_request_bytes, self.max_spans, self.max_payload_bytes, self.max_records) < 1:
            raise ValueError("limits must be positive")
        kafka_auth(self)  # contradictory TLS/SASL settings
        return self

    @classmethod
    def from_env(cls, environ: dict | None = None, **overrides: Any) -> SpanSettings:
        """``overrides`` > ``LOOPWARDEN_SPANS_<FIELD>`` env vars > defaults."""
        return settings_from_env(cls, ENV_PREFIX, environ, overrides)


class Out(msgspec.Struct, frozen=True):
    topic: str
    key: bytes | None
    value: bytes


class SpanCounts(msgspec.Struct, kw_only=True):
    """What the consumer did (logged every ``stats_interval``)."""

    records: int = 0
    spans: int = 0  # tool and agent spans read (the others are dropped as they are read)
    tool_spans: int = 0
    run_ends: int = 0
    events: int = 0
    dead: Counter = msgspec.field(default_factory=Counter)  # reason
    # "<family>:<gap>": tool spans mapped with something missing (mapping.GAP_*), and
    # "<family>:no_arguments" for the ones dead-lettered for it; each logged once, when first seen
    inexact: Counter = msgspec.field(default_factory=Counter)
    publish_retries: int = 0
    publish_dropped: int = 0  # records the broker refuses for good (too large, forbidden topic)


def _dead_letter(reason: str, detail: str, record: Any, raw: bytes | None) -> bytes:
    return json_bytes(dead_letter(reason, detail, record.topic, record.partition, record.offset, raw))


_GAP_TEXT = {
    "no_arguments": "its tool spans carry no arguments (content capture off?): they are dead-lettered, not judged",
    GAP_NO_RESULT: "its tool spans carry no result: loops are judged on arguments only (no no-progress verdicts)",
    GAP_BARE_ARGUMENTS: "a one-argument tool's span has the bare value and its call is not listed in the record: "
    "its arguments do not hash as a runner's would",
}


def _inexact(counts: SpanCounts, fam: str, gap: str) -> None:
    """Count what a family's spans cannot say; say it once (per process) in the log."""
    key = f"{fam}:{gap}"
    counts.inexact[key] += 1
    if counts.inexact[key] == 1:
        log.warning("spans of %s: %s (counted as inexact %s)", fam, _GAP_TEXT.get(gap, gap), key)


def translate(
    record: Any, settings: SpanSettings, counts: SpanCounts | None = None, announced: Announced | None = None
) -> list[Out]:
    """One exporter record -> the events (keyed by run) and dead letters to publish, in order.
    ``announced``: the tool calls models announced in earlier records (kept by the consumer)."""
    counts = counts if counts is not None else SpanCounts()
    counts.records += 1
    dlq = settings.dead_letter_topic
    why = unreadable(record.key, record.value, getattr(record, "headers", None))
    if why is not None:
        counts.dead["unreadable"] += 1
        return [Out(dlq, None, _dead_letter("unreadable", why, record, None))]
    try:
        spans = decode_spans(
            record.value, settings.encoding, settings.max_request_bytes, settings.max_spans, keep=relevant
        )
        counts.spans += len(spans)
        mapped = map_spans(spans, settings.max_payload_bytes, announced)
    except SpanDecodeError as exc:
        counts.dead[exc.reason] += 1
        return [Out(dlq, record.key, _dead_letter(exc.reason, exc.detail, record, record.value))]
    except Exception as exc:  # a bug in decoding or mapping must not stop the span stream
        log.exception("mapping failed at %s:%s:%s", record.topic, record.partition, record.offset)
        counts.dead["engine_error"] += 1
        detail = f"{type(exc).__name__}: {exc}"
        return [Out(dlq, record.key, _dead_letter("engine_error", detail, record, record.value))]
    for fam, gap in mapped.gaps:
        _inexact(counts, fam, gap)
    counts.tool_spans += mapped.tool_spans
    counts.run_ends += mapped.run_ends
    counts.events += len(mapped.events)
    out = [Out(settings.events_topic, run_key(e).encode(), encode_event(e)) for e in mapped.events]
    for bad in mapped.rejected:
        counts.dead[bad.reason] += 1
        if bad.reason == "otel_no_arguments":
            _inexact(counts, family(bad.span), "no_arguments")
        out.append(Out(dlq, record.key, _dead_letter(bad.reason, bad.detail, record, bad.span.raw())))
    return out


class SpanIngest:
    """The consumer loop: fetch, translate, deliver everything, then commit."""

    def __init__(self, settings: SpanSettings) -> None:
        self.settings = settings
        self.counts = SpanCounts()
        self.announced = Announced()  # across records: a tool span and its tools node may be exported apart
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        s = self.settings.check()
        install_parse_guard()  # a record aiokafka cannot parse is a mark: dead-lettered as unreadable
        auth = kafka_auth(s)
        consumer = AIOKafkaConsumer(
            s.spans_topic,
            bootstrap_servers=servers(s.bootstrap),
            group_id=s.group_id,
            client_id=s.client_id,
            enable_auto_commit=False,
            auto_offset_reset=s.start,
            fetch_max_wait_ms=s.fetch_wait_ms,
            max_partition_fetch_bytes=max(1_048_576, s.max_request_bytes + 1024),
            fetch_max_bytes=max(52_428_800, s.max_request_bytes + 1024),
            **auth,
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=servers(s.bootstrap),
            client_id=s.client_id,
            acks="all",
            enable_idempotence=False,
            linger_ms=5,
            max_request_size=max(1_048_576, s.max_request_bytes + 65_536),
            **auth,
        )
        try:
            await start_client(producer)
        except BaseException:
            await consumer.stop()  # made, never started: closed, so that aiokafka has no "Unclosed" at exit
            raise
        try:
            await start_client(consumer)
            try:
                await self._loop(consumer, producer)
            finally:
                await consumer.stop()
        finally:
            await producer.stop()

    async def _loop(self, consumer: Any, producer: Any) -> None:
        s = self.settings
        logged = time.monotonic()
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            while not self._stop.is_set():
                fetch = asyncio.ensure_future(consumer.getmany(timeout_ms=500, max_records=s.max_records))
                await asyncio.wait({fetch, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not fetch.done():
                    fetch.cancel()
                    break
                batch = fetch.result()
                outgoing: list[Out] = []
                for records in batch.values():
                    for record in records:
                        outgoing += translate(record, s, self.counts, self.announced)
                if not await self._deliver(producer, outgoing):
                    break  # stopped during a broker outage: the batch is read again after the restart
                if batch:
                    await consumer.commit()  # only what is delivered
                if s.stats_interval and time.monotonic() - logged >= s.stats_interval:
                    logged = time.monotonic()
                    log.info("spans: %s", msgspec.json.encode(self.counts).decode())
        finally:
            stopped.cancel()

    async def _deliver(self, producer: Any, outgoing: list[Out]) -> bool:
        """Deliver every record, retrying what failed for a reason that passes (a broker outage) with
        capped backoff; a record the broker refuses for good is logged, counted and skipped, so one
        record cannot stop the stream. False if stopped before everything was delivered."""
        from aiokafka.errors import KafkaTimeoutError  # not marked retriable, but what a broker outage raises

        pending = outgoing
        backoff = 0.2
        while pending:
            futures = []
            for o in pending:
                try:
                    futures.append(await producer.send(o.topic, o.value, key=o.key))
                except Exception as exc:  # noqa: BLE001 - sorted below, like a failed delivery
                    futures.append(exc)
            results = await asyncio.gather(
                *(f for f in futures if not isinstance(f, Exception)), return_exceptions=True
            )
            it = iter(results)
            outcomes = [f if isinstance(f, Exception) else next(it) for f in futures]
            retry = []
            for o, outcome in zip(pending, outcomes):
                if not isinstance(outcome, Exception):
                    continue
                if getattr(outcome, "retriable", False) or isinstance(
                    outcome, (KafkaTimeoutError, TimeoutError, ConnectionError)
                ):
                    retry.append(o)
                else:
                    self.counts.publish_dropped += 1
                    log.error("dropped a record for %s the broker refuses: %r", o.topic, outcome)
            if retry:
                self.counts.publish_retries += len(retry)
                log.warning("retrying %d records in %.1f s", len(retry), backoff)
                try:
                    await asyncio.wait_for(self._stop.wait(), backoff)
                    return False
                except TimeoutError:
                    pass
                backoff = min(backoff * 2, 5.0)
            pending = retry
        return True
