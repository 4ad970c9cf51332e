"""Helpers of the integration tests: worker subprocesses, produce/collect, expected verdicts."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from loopwarden.devtools import processes as devtools
from loopwarden.devtools.processes import TopicNames
from loopwarden.replay import replay_lines
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import key_for
from loopwarden.sidecar.process import SidecarProcess

REPO = Path(__file__).resolve().parents[2]
_counter = itertools.count()


class Names(TopicNames):
    """Per-test topic names and app id, so tests share one broker without sharing state."""

    def __init__(self, tag: str) -> None:
        super().__init__(f"{tag}{next(_counter)}-{os.getpid()}")


class WorkerProcess(devtools.WorkerProcess):
    """A worker of one test: its topics, data dir, logs next to the test's tmp dir."""

    def __init__(
        self,
        bootstrap: str,
        names: Names,
        data_dir: Path,
        config: Path | None = None,
        extra: list[str] | None = None,
        log_dir: Path | None = None,
    ) -> None:
        super().__init__(bootstrap, data_dir, names=names, config=config, extra=extra or [], log_dir=log_dir, cwd=REPO)
        self.bootstrap = bootstrap


def ready_worker(tansu: str, tmp: Path, tag: str, config: dict) -> Iterable[WorkerProcess]:
    """Generator for a module-scoped fixture: one ready worker with ``config``, stopped afterwards."""
    path = tmp / "loop.json"
    path.write_text(json.dumps(config))
    w = WorkerProcess(tansu, Names(tag), tmp / "data", config=path)
    w.start()
    try:
        w.wait_ready()
        yield w
    finally:
        w.stop()


def fleet_args(tansu: str, names: Names) -> list[str]:
    """A decision service's flags for a worker's broker and topics (its events, verdicts and config)."""
    return [
        "--bootstrap",
        tansu,
        "--events-topic",
        names.events,
        "--control-topic",
        names.control,
        "--config-topic",
        names.config,
    ]


def ready_fleet(tansu: str, tmp: Path, tag: str, config: dict) -> Iterable[tuple[WorkerProcess, SidecarProcess]]:
    """Generator for a module-scoped fixture: a ready worker with ``config`` and a decision service with the
    same config on its topics, both stopped afterwards."""
    for worker in ready_worker(tansu, tmp, tag, config):
        args = ["--config", str(tmp / "loop.json"), *fleet_args(tansu, worker.names)]
        sidecar = SidecarProcess(args, log_path=tmp / "sidecar.log").start()
        try:
            yield worker, sidecar
        finally:
            sidecar.stop()


async def ensure_topics_of(bootstrap: str, names: Names) -> None:
    """Create a test's topics (as a worker does at start), for tests that run clients without a worker."""
    from loopwarden.kafka.admin import ensure_topics
    from loopwarden.worker.settings import Settings

    await ensure_topics(
        Settings(
            broker=f"kafka://{bootstrap}",
            events_topic=names.events,
            control_topic=names.control,
            config_topic=names.config,
            dead_letter_topic=names.dead_letter,
        )
    )


def quick_client(bootstrap: str, names: Names, **kw: Any) -> Any:
    """A runner client on a test's topics that notices a dead broker fast (short timeouts, back-off)."""
    from loopwarden.runner import LoopClient

    return LoopClient(
        bootstrap=bootstrap,
        events_topic=names.events,
        control_topic=names.control,
        config_topic=names.config,
        request_timeout_ms=1500,
        reconnect_backoff_max=0.5,
        close_timeout=1.0,
        **kw,
    )


async def until(predicate: Any, timeout: float = 60.0) -> None:
    """A hang guard for what the broker drives, not a latency check."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)


def run_key(event: dict) -> str:
    """The Kafka key of an event given as a dict (the one rule, :func:`loopwarden.schemas.events.key_for`)."""
    return key_for(event["agent_id"], event.get("session_id"), event.get("run_id"))


async def produce(
    bootstrap: str, topic: str, items: Iterable[tuple[bytes | None, bytes | None]]
) -> list[tuple[int, int]]:
    """Send (key, value) pairs in order; return each one's (partition, offset)."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=1 << 20)
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in items]
        metas = await asyncio.gather(*futures)
        return [(m.partition, m.offset) for m in metas]
    finally:
        await producer.stop()


def produce_events(bootstrap: str, topic: str, events: list[dict], ts: bool = True) -> list[tuple[int, int]]:
    items = []
    for e in events:
        if ts:
            e = {**e, "ts": time.time()}
        items.append((run_key(e).encode(), json.dumps(e).encode()))
    return asyncio.run(produce(bootstrap, topic, items))


async def _collect(bootstrap: str, topic: str, until: Any, idle: float, timeout: float) -> list:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=50
    )
    await consumer.start()
    records: list = []
    try:
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            got = [r for recs in batch.values() for r in recs]
            records += got
            if got:
                quiet_since = time.monotonic()
            if until(records) and time.monotonic() - quiet_since >= idle:
                break
        return records
    finally:
        await consumer.stop()


def collect(
    bootstrap: str, topic: str, until: Any = lambda records: True, idle: float = 2.0, timeout: float = 60.0
) -> list:
    """Read ``topic`` from the start until ``until(records)`` holds and nothing new came for ``idle`` s."""
    return asyncio.run(_collect(bootstrap, topic, until, idle, timeout))


def expected_verdicts(
    events: list[dict], positions: list[tuple[int, int]], topic: str, fleet: FleetConfig
) -> dict[str, dict]:
    """verdict_id -> replay row, for every emitted detection (schemas/WIRE.md: only those are published)."""
    lines = [json.dumps(e) for e in events]
    out: dict[str, dict] = {}
    per_event: dict[int, int] = {}
    for row in replay_lines(lines, fleet):
        if not isinstance(row, dict) or not row["emitted"]:
            continue
        i = row["event_index"]
        j = per_event.get(i, 0)
        per_event[i] = j + 1
        partition, offset = positions[i]
        out[f"{topic}:{partition}:{offset}:{j}"] = row
    return out


def decode_verdicts(records: Iterable, type_: str = "verdict") -> list[tuple[bytes, dict]]:
    """The control topic's records of one type (verdicts; ``verdict_violation`` records share the topic)."""
    out = [(r.key, json.loads(r.value)) for r in records]
    return [(k, v) for k, v in out if v.get("type") == type_]


def assert_matches(verdict: dict, row: dict) -> None:
    for field in (
        "level",
        "detector",
        "count",
        "warning_key",
        "tool_name",
        "message",
        "action",
        "agent_id",
        "session_id",
        "run_id",
    ):
        assert verdict.get(field) == row.get(field), (field, verdict, row)
    assert verdict.get("paired_tool_name") == row.get("paired_tool_name"), (verdict, row)


class ThrottledProducer:
    """Produces events in the background at a bounded rate, so a worker can be killed mid-stream."""

    def __init__(self, bootstrap: str, topic: str, events: list[dict], chunk: int = 50, pause: float = 0.1) -> None:
        import threading

        self.bootstrap, self.topic, self.events = bootstrap, topic, events
        self.chunk, self.pause = chunk, pause
        self.positions: list[tuple[int, int]] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ThrottledProducer:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as exc:  # reported by join()
            self.error = exc

    async def _produce(self) -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        await producer.start()
        try:
            for i in range(0, len(self.events), self.chunk):
                futures = []
                for e in self.events[i : i + self.chunk]:
                    e = {**e, "ts": time.time()}
                    futures.append(await producer.send(self.topic, json.dumps(e).encode(), key=run_key(e).encode()))
                metas = await asyncio.gather(*futures)
                self.positions += [(m.partition, m.offset) for m in metas]
                await asyncio.sleep(self.pause)
        finally:
            await producer.stop()

    @property
    def running(self) -> bool:
        return self.thread.is_alive()

    def join(self) -> list[tuple[int, int]]:
        self.thread.join(120)
        if self.error is not None:
            raise self.error
        assert len(self.positions) == len(self.events)
        return self.positions


def check_against_replay(records: list, expected: dict[str, dict]) -> dict[str, int]:
    """Every expected verdict arrived, nothing else did, and repeats (same verdict_id) are identical."""
    seen: dict[str, dict] = {}
    repeats = 0
    for _key, verdict in decode_verdicts(records):
        vid = verdict["verdict_id"]
        assert vid in expected, f"verdict replay does not predict: {verdict}"
        assert_matches(verdict, expected[vid])
        if vid in seen:
            repeats += 1
        seen[vid] = verdict
    missing = set(expected) - set(seen)
    assert not missing, f"{len(missing)} verdicts missing, e.g. {sorted(missing)[:3]}"
    return {"verdicts": len(seen), "repeats": repeats}


async def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        if not partitions:
            await consumer.topics()
            partitions = consumer.partitions_for_topic(topic) or set()
        return {p: (await consumer.committed(TopicPartition(topic, p))) or 0 for p in partitions}
    finally:
        await consumer.stop()


def wait_committed(
    bootstrap: str, group: str, topic: str, positions: list[tuple[int, int]], timeout: float = 60.0
) -> None:
    """Wait until the group's committed offsets cover every produced position (the worker is idle)."""
    ends: dict[int, int] = {}
    for partition, offset in positions:
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    deadline = time.monotonic() + timeout
    committed: dict[int, int] = {}
    while time.monotonic() < deadline:
        committed = asyncio.run(_committed(bootstrap, group, topic))
        if all(committed.get(p, 0) >= end for p, end in ends.items()):
            return
        time.sleep(0.3)
    raise AssertionError(f"committed {committed} never reached {ends}")
