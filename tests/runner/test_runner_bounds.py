"""The runner's outbox and run state under hostile sizes, refusals, lost cancels and stale verdicts (no broker)."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace

import pytest
from aiokafka.errors import MessageSizeTooLargeError, RecordListTooLargeError

from loopwarden.runner import ClientSettings, LoopClient
from loopwarden.runner.outbox import Outbox, OutboxEvents, OutboxLimits
from loopwarden.runner.state import RunState
from loopwarden.schemas.verdicts import Verdict


def outbox(make_producer, max_buffered, **kw) -> Outbox:
    """An Outbox from keywords: its limits, and ``on_NAME`` callables as its events' NAME."""
    events = OutboxEvents()
    for name in [k for k in kw if k.startswith("on_")]:
        setattr(events, name[3:], kw.pop(name))
    return Outbox(make_producer, OutboxLimits(max_buffered=max_buffered, **kw), events)


class Producer:
    """Sends into ``world["log"]``; a value starting ``big`` is refused at send(), ``huge`` at delivery."""

    def __init__(self, world: dict) -> None:
        self.world = world
        self.client = SimpleNamespace(cluster=SimpleNamespace(partitions_for_topic=lambda topic: {0, 1, 2}))

    async def start(self) -> None:
        self.world["starts"] += 1

    async def stop(self) -> None:
        pass

    async def send(self, topic, value, key=None, partition=None):
        if value.startswith(b"big"):
            raise MessageSizeTooLargeError("The message is 2000000 bytes when serialized")
        fut = asyncio.get_running_loop().create_future()
        if value.startswith(b"huge"):
            fut.set_exception(RecordListTooLargeError())
        else:
            self.world["log"].append(value)
            fut.set_result(None)
        return fut


def counter() -> tuple[dict, callable]:
    counts: dict[str, int] = {}

    def on(name: str):
        return lambda: counts.__setitem__(name, counts.get(name, 0) + 1)

    return counts, on


async def until(predicate, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):  # a hang guard, not a latency check
        while not predicate():
            await asyncio.sleep(0.01)


async def test_a_refused_event_is_dropped_counted_and_logged_once_and_the_rest_go_on(caplog):
    world = {"starts": 0, "log": []}
    counts, on = counter()
    box = outbox(
        lambda: Producer(world),
        100,
        send_timeout=1.0,
        close_timeout=1.0,
        on_sent=on("sent"),
        on_refused=on("refused"),
        on_down=on("down"),
    )
    box.start()
    with caplog.at_level(logging.WARNING, logger="loopwarden.runner.outbox"):
        for value in (b"a", b"big1", b"b", b"huge1", b"c", b"big2", b"d"):
            assert box.put("t", b"k", value)
        await until(lambda: len(box) == 0)
    assert world["log"] == [b"a", b"b", b"c", b"d"]
    assert counts == {"sent": 4, "refused": 3}  # no "down": a refusal is not an outage
    assert world["starts"] == 1 and box.buffered_bytes == 0
    refused = [r for r in caplog.records if "refuse" in r.getMessage()]
    assert len(refused) == 1, [r.getMessage() for r in caplog.records]  # once per log interval, not per event
    assert await box.close(0.5) == 0


async def test_events_over_the_size_limit_are_never_queued():
    counts, on = counter()
    box = outbox(lambda: None, 100, send_timeout=1.0, close_timeout=1.0, max_event_bytes=1000, on_too_large=on("big"))
    assert not box.put("t", b"k", b"x" * 1001) and box.put("t", b"k", b"x" * 1000)
    assert counts == {"big": 1} and len(box) == 1


async def test_the_outbox_is_bounded_by_bytes_not_only_by_count():
    counts, on = counter()
    box = outbox(
        lambda: None, 10_000, send_timeout=1.0, close_timeout=1.0, max_buffered_bytes=10_000, on_dropped=on("dropped")
    )
    kept = sum(box.put("t", b"key", b"v" * 997) for _ in range(50))  # 1,000 bytes each with the key
    assert kept == 10 and counts == {"dropped": 40} and box.buffered_bytes == 10_000
    assert box.put("t", None, b"") is True  # an empty event still fits


class LosesCancels:
    """A producer whose start() swallows a cancel and fails (what Python 3.11's wait_for did to the pump)."""

    async def start(self) -> None:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            pass
        raise ConnectionError("broker down")

    async def stop(self) -> None:
        pass


async def test_close_returns_when_the_sender_loses_its_cancel():
    box = outbox(LosesCancels, 100, send_timeout=1.0, close_timeout=0.5, backoff_max=0.01)
    box.put("t", b"k", b"v")
    box.start()
    await asyncio.sleep(0.3)
    closing = asyncio.ensure_future(box.close(1.0))
    done, _ = await asyncio.wait({closing}, timeout=30)  # a hang guard: before the fix it never returned
    assert done and closing.result() == 1


def test_an_unknown_keyword_is_an_error_naming_it():
    with pytest.raises(TypeError, match="config_key"):
        LoopClient(config_key="AAAA")  # a misspelt config_keys must not silently turn signatures off
    assert LoopClient(config_keys="AAAA", max_buffered_bytes=1 << 20).settings.config_keys == "AAAA"
    env = {"LOOPWARDEN_RUNNER_CONFIG_KEYS": "BBBB", "LOOPWARDEN_RUNNER_MAX_BUFFERED_BYTES": "1024"}
    s = ClientSettings.from_env(env)
    assert (s.config_keys, s.max_buffered_bytes) == ("BBBB", 1024)


def make(vid: str, **kw) -> Verdict:
    return Verdict(verdict_id=vid, action="abort", agent_id="a", session_id="s", **kw)


def test_a_run_owns_only_verdicts_of_its_calls_and_its_lifetime():
    state = RunState(started=1000.0)
    state.made("c-new", "read")
    assert state.owns(make("v1", tool_call_id="c-new", event_ts=1001.0))
    assert not state.owns(make("v2", tool_call_id="c-old", event_ts=1001.0))  # a call this run never made
    assert not state.owns(make("v3", tool_call_id="c-new", event_ts=900.0))  # an event from before the run
    assert not state.owns(make("v4", event_ts=900.0))  # no call named, older than the run
    assert state.owns(make("v5", event_ts=1000.5))  # no call named (a compaction retry's abort), this run's time
    assert not state.owns(make("v6"))  # nothing ties it to this run
    assert state.tool_of("c-new") == "read" and state.tool_of("c-old") is None
    assert RunState().started == pytest.approx(time.time(), abs=5)


async def test_a_verdict_with_oversized_identifiers_is_not_kept():
    # the seen-id LRU holds 65,536 ids: at a megabyte each that would be 64 GB
    client = LoopClient()
    run = client.run("a", "s", run_id="r1")
    client._on_verdict(b"r1", make("x" * 1_000_000, event_ts=time.time()))
    client._on_verdict(b"r1", make("v1", event_ts=time.time(), warning_key="k" * 1_000_000))
    assert run.aborted is None and client.stats.undecodable == 2 and len(client._seen) == 0
    client._on_verdict(b"r1", make("v2", event_ts=time.time()))
    assert run.aborted is not None and run.aborted.verdict_id == "v2"
