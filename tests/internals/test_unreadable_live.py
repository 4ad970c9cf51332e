"""No record stops a reader, live on Tansu: records aiokafka cannot parse and nesting past every
decoder's recursion bound, on each topic a loopwarden process reads.

The unreadable record is a batch whose header key is ``b"\\xff\\xfe"`` (not UTF-8: aiokafka's
parser raises), sent byte for byte (:mod:`loopwarden.devtools.rawrecords`); the deep one is
2 KB of ``[``. Without the parse guard (``loopwarden.internals.aiokafka_records``) and the depth
bounds, the worker exits at start (config topic) or on the event (events topic), the runner's
listener retries forever and ``loopwarden spans`` exits: each test here fails.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from loopwarden.devtools.rawrecords import encode_batch, send_batch
from loopwarden.kafka.admin import ensure_topics
from loopwarden.worker.settings import from_sources
from tests.support.live import collect, decode_verdicts, produce, wait_committed
from tests.worker.test_bad_input import LOOP

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BAD_HEADER = encode_batch([(None, b'{"type": "tool_call"}', [(b"\xff\xfe", b"x")])])
DEEP = b"[" * 1000 + b"]" * 1000


async def topics(tansu: str, names) -> None:
    settings = from_sources(
        {
            "broker": f"kafka://{tansu}",
            "events_topic": names.events,
            "control_topic": names.control,
            "shadow_topic": names.shadow,
            "config_topic": names.config,
            "dead_letter_topic": names.dead_letter,
            "incidents_topic": names.incidents,
        },
        environ={},
    )
    await ensure_topics(settings)


async def raw(tansu: str, topic: str, partition: int = 0, batch: bytes = BAD_HEADER) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=tansu)
    await producer.start()
    try:
        await send_batch(producer, topic, partition, batch)
    finally:
        await producer.stop()


def start_worker(names, workers, tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"tools": {"loopDetection": {"enabled": True}}}))
    worker = workers(names, config=config)
    worker.wait_ready()
    return worker


def loop_around(tansu: str, names, batch: bytes) -> tuple[list, tuple[int, int], list]:
    """A looping run's first call, ``batch`` on the run's partition, then 11 more calls: the
    positions of the first, of the batch (nothing else writes the test's topic) and of the rest."""
    first = asyncio.run(produce(tansu, names.events, [(b"r1", json.dumps({**LOOP, "ts": time.time()}).encode())]))
    partition = first[0][0]
    asyncio.run(raw(tansu, names.events, partition, batch))
    later = [(b"r1", json.dumps({**LOOP, "ts": time.time()}).encode()) for _ in range(11)]
    return first, (partition, first[0][1] + 1), asyncio.run(produce(tansu, names.events, later))


def dead_lettered_and_read_around(tansu: str, names, bad: tuple[int, int], why: str) -> None:
    """One dead letter, ``unreadable`` at ``bad`` saying ``why``; the run's events around it were all
    read (its 10th identical call warns)."""
    letters = collect(tansu, names.dead_letter, until=lambda rs: len(rs) >= 1)
    (letter,) = [json.loads(r.value) for r in letters]
    assert letter["reason"] == "unreadable" and why in letter["detail"]
    assert (letter["topic"], letter["partition"], letter["offset"]) == (names.events, *bad)
    verdicts = decode_verdicts(collect(tansu, names.control, until=lambda rs: len(rs) >= 1))
    assert [v["level"] for _, v in verdicts][:1] == ["warning"]


def test_worker_reads_past_unreadable_and_deep_records_on_its_config_and_events_topics(tansu, names, workers, tmp_path):
    asyncio.run(topics(tansu, names))
    # The config topic first: before the fix every worker exited at start, before any signature check.
    asyncio.run(raw(tansu, names.config))
    asyncio.run(produce(tansu, names.config, [(b"*", DEEP), (b"a1", json.dumps({"historySize": 40}).encode())]))
    worker = start_worker(names, workers, tmp_path)
    first, bad, rest = loop_around(tansu, names, BAD_HEADER)

    dead_lettered_and_read_around(tansu, names, bad, "UnicodeDecodeError")
    wait_committed(tansu, names.app_id, names.events, first + [bad] + rest)  # the offset moved past it
    assert worker.alive()
    metrics = worker.metrics()
    assert metrics['loopwarden_config_refused_total{reason="unreadable"}'] == 1.0
    assert metrics['loopwarden_config_refused_total{reason="bad_record"}'] == 1.0
    assert metrics['loopwarden_dead_letters_total{reason="unreadable"}'] == 1.0


def test_worker_dead_letters_a_gzip_bomb_and_reads_on(tansu, names, workers, tmp_path):
    """70 MiB of zeros in one gzip batch of about 70 KB: aiokafka would inflate and hold all of it;
    the bounded decoder stops at 64 MiB, the batch is dead-lettered as unreadable with its position,
    and the run's next events are decided."""
    asyncio.run(topics(tansu, names))
    worker = start_worker(names, workers, tmp_path)
    bomb = encode_batch([(b"r1", b"\0" * (70 << 20), [])], 1)
    assert len(bomb) < 200 << 10
    _, bad, _ = loop_around(tansu, names, bomb)
    dead_lettered_and_read_around(tansu, names, bad, "expands past 67108864 bytes")
    assert worker.alive()


def test_runner_listener_and_config_feed_read_past_unreadable_and_deep_records(tansu, names):
    from loopwarden.runner.listener import VerdictListener
    from loopwarden.runner.local import ConfigSource
    from loopwarden.runner.settings import ClientSettings
    from loopwarden.schemas.config import FleetConfig

    asyncio.run(topics(tansu, names))
    settings = ClientSettings(bootstrap=tansu, control_topic=names.control, config_topic=names.config)
    verdict = {
        "type": "verdict",
        "verdict_id": "v1",
        "action": "warn",
        "agent_id": "a1",
        "run_id": "r1",
        "session_id": "s1",
        "tool_name": "read",
        "detector": "generic_repeat",
        "level": "warning",
        "message": "m",
        "count": 10,
        "ts": 1.0,
    }

    async def go() -> tuple[list, int, dict]:
        got: list = []
        undecodable = []
        listener = VerdictListener(settings, lambda key, v: got.append((key, v)), lambda: undecodable.append(1))
        await listener.start()
        fleets: list = []
        source = ConfigSource(FleetConfig(), settings, fleets.append)
        source.start()
        try:
            for topic in (names.control, names.config):
                await raw(tansu, topic)
            await produce(tansu, names.control, [(None, DEEP), (b"a1|s1|r1", json.dumps(verdict).encode())])
            await produce(tansu, names.config, [(None, DEEP), (b"*", DEEP), (b"a1", b'{"warningThreshold": 4}')])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (got and fleets):
                await asyncio.sleep(0.1)
            assert not listener._task.done(), "the listener stopped"
            return got, len(undecodable), dict(source.feed.refused)
        finally:
            await listener.stop()
            if source._task is not None:
                source._task.cancel()

    got, undecodable, refused = asyncio.run(go())
    assert [v.verdict_id for _, v in got] == ["v1"]
    assert undecodable == 2  # the unreadable mark and the deep record, counted
    assert refused == {"unreadable": 1, "bad_record": 1}  # the null-keyed deep record is ignored as keyless


def test_spans_reads_past_an_unreadable_record(tansu, names):
    from loopwarden.otel.ingest import SpanIngest, SpanSettings
    from tests.otel.otel_helpers import encoded, fixture

    spans_topic = f"spans-{names.app_id}"
    settings = SpanSettings(
        bootstrap=tansu,
        spans_topic=spans_topic,
        encoding="otlp_json",
        events_topic=names.events,
        dead_letter_topic=names.dead_letter,
        group_id=f"{names.app_id}-spans",
        start="earliest",
    )

    async def go() -> SpanIngest:
        await raw(tansu, spans_topic)
        await produce(
            tansu, spans_topic, [(None, DEEP), (None, encoded(fixture("pydantic_ai.otlp.json"), "otlp_json"))]
        )
        ingest = SpanIngest(settings)
        task = asyncio.create_task(ingest.run())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and ingest.counts.events == 0 and not task.done():
            await asyncio.sleep(0.1)
        ingest.stop()
        await asyncio.wait_for(task, 20)  # returns (a crash would raise here)
        return ingest

    ingest = asyncio.run(go())
    assert ingest.counts.events > 0
    assert ingest.counts.dead["unreadable"] == 1 and ingest.counts.dead["otel_bad_request"] == 1
    letters = [json.loads(r.value) for r in collect(tansu, names.dead_letter, until=lambda rs: len(rs) >= 2)]
    assert sorted(letter["reason"] for letter in letters) == ["otel_bad_request", "unreadable"]
