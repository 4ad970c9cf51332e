"""The runner client against hostile sizes, a broker that goes away at close, forged config and stale verdicts
(live, on Tansu).

- an event over the size limit is dropped and counted; it neither jams the outbox nor turns later gated calls
  into ``offline`` allows (with a real worker answering them);
- ``close()`` returns with the broker stopped or frozen, after the event loop was busy for a moment;
- with ``config_keys``, the runner's own config feed applies only records an operator signed;
- an old signed abort of the same session, on the topic before the runner starts or written again, does not
  abort a new run; a verdict for a call the run never made is dropped too.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import time
import uuid

import pytest

from loopwarden.devtools.broker import EmbeddedBroker, free_port
from loopwarden.kafka.signing import Signer, generate, private_key, public_keys, raw_public
from loopwarden.schemas.verdicts import Verdict, encode_verdict
from tests.support.live import Names, WorkerProcess, ensure_topics_of, quick_client, ready_worker, until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 12}}}
EXPECTED = ["allow"] * 10 + ["warn", "allow", "block"]


@pytest.fixture(scope="module")
def worker(tansu, tmp_path_factory):
    yield from ready_worker(tansu, tmp_path_factory.mktemp("hardening-worker"), "hardening", CONFIG)


def key_pair(topic: str) -> tuple[Signer, str]:
    """A signer for ``topic`` and its public key as the settings take it (base64)."""
    private, public, _ = generate()
    return Signer(private_key(private), [topic]), base64.b64encode(raw_public(public_keys(public)[0])).decode()


async def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None, list | None]]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value, headers in records:
            await (await producer.send(topic, value, key=key, headers=headers))
    finally:
        await producer.stop()


async def test_an_event_over_the_size_limit_jams_neither_the_outbox_nor_the_gate(tansu, worker: WorkerProcess, caplog):
    client = quick_client(tansu, worker.names, decisions="worker", check_timeout=10.0)
    async with client:
        run = client.run("agent-big", run_id=f"big-{uuid.uuid4().hex[:8]}")
        d = await run.check("read", {"path": "a.md"})
        assert d.source == "verdict"
        await run.tool_result(d, result="x" * 1_500_000)  # over max_event_bytes (1 MiB): the worker's limit too
        sources, actions = [], []
        for _ in range(len(EXPECTED)):
            d = await run.check("read", {"path": "b.md"})
            sources.append(d.source)
            actions.append(d.action)
            await run.tool_result(d, result=d.blocked_result() if not d.proceed else "same")
        # every later call is still answered by the worker, with the rules applied: not "offline" allows
        assert sources == ["verdict"] * len(EXPECTED), sources
        assert actions == EXPECTED, actions
        s = client.stats
        assert (s.events_too_large, s.disconnects, s.events_dropped) == (1, 0, 0)
    dropped = [r for r in caplog.records if "max_event_bytes" in r.getMessage()]
    assert len(dropped) == 1


@pytest.mark.parametrize("trouble", ["down_at_start", "stopped", "frozen"])
async def test_close_returns_when_the_broker_is_down_stopped_or_frozen(tmp_path, trouble):
    port = free_port()
    names = Names("closehang")
    broker = EmbeddedBroker(port=port, log_path=tmp_path / "tansu.log").start()
    frozen = False
    try:
        await ensure_topics_of(broker.bootstrap, names)
        if trouble == "down_at_start":
            await broker.astop()
        client = await quick_client(broker.bootstrap, names, config=CONFIG).start()
        run = client.run("agent-c", run_id=f"c-{uuid.uuid4().hex[:8]}")
        for i in range(5):
            d = await run.check("read", {"i": i})
            await run.tool_result(d, result="ok")
        if trouble == "stopped":
            await broker.astop()
        elif trouble == "frozen":
            os.kill(broker.process.pid, signal.SIGSTOP)
            frozen = True
        for i in range(20):  # the runner goes on; its clients retry in the background
            d = await run.check("read", {"i": i})
            await run.tool_result(d, result="ok")
            await asyncio.sleep(0.05)
        time.sleep(0.3)  # the event loop busy for a moment, as an agent's own work makes it
        closing = asyncio.ensure_future(client.close())
        done, _ = await asyncio.wait({closing}, timeout=60)  # a hang guard: before the fix it never returned
        assert done, "close() did not return"
        closing.result()
        assert not client.connected
    finally:
        if frozen:
            os.kill(broker.process.pid, signal.SIGCONT)
        broker.stop()


async def drive(run, n: int) -> list[str]:
    actions = []
    for _ in range(n):
        d = await run.check("read", {"path": "same.md"})
        actions.append(d.action)
        await run.tool_result(d, result=d.blocked_result() if not d.proceed else "same")
    return actions


async def test_the_runner_applies_only_config_records_an_operator_signed(tansu):
    names = Names("cfgsigned")
    await ensure_topics_of(tansu, names)
    signer, public = key_pair(names.config)
    off = json.dumps({"enabled": False}).encode()
    await produce(tansu, names.config, [(b"*", off, None)])  # unsigned: whoever can write the topic
    async with quick_client(tansu, names, config=CONFIG, config_keys=public) as client:
        assert client.stats.config_rejected == 1
        run = client.run("agent-cfg", run_id=f"cfg-{uuid.uuid4().hex[:8]}")
        assert await drive(run, len(EXPECTED)) == EXPECTED  # the file's rules hold
        await run.end()
        await produce(tansu, names.config, [(b"*", off, signer.headers(names.config, b"*", off))])
        await until(lambda: not client.fleet.resolve("agent-cfg").enabled)  # the signed record is applied, live
        run = client.run("agent-cfg", run_id=f"cfg-{uuid.uuid4().hex[:8]}")
        assert await drive(run, len(EXPECTED)) == ["allow"] * len(EXPECTED)
        assert client.stats.config_rejected == 1


def signed_verdict(signer: Signer, topic: str, key: bytes, verdict: Verdict) -> tuple[bytes, bytes, list]:
    value = encode_verdict(verdict)
    return key, value, signer.headers(topic, key, value)


async def test_an_old_signed_abort_of_the_session_does_not_abort_a_new_run(tansu):
    names = Names("staleabort")
    await ensure_topics_of(tansu, names)
    signer, public = key_pair(names.control)
    session, key = "s-replayed", b"s-replayed"  # no run_id: the run key is the session
    old = Verdict(
        verdict_id="old-abort",
        action="abort",
        agent_id="agent-s",
        session_id=session,
        level="critical",
        detector="compaction_loop_persisted",
        count=3,
        tool_name="read",
        tool_call_id="call_of_the_old_run",
        event_ts=time.time() - 3600,
        ts=time.time() - 3600,
    )
    replay = signed_verdict(signer, names.control, key, old)
    await produce(tansu, names.control, [replay])  # on the topic before the runner starts listening
    got: list[Verdict] = []
    async with quick_client(tansu, names, config=CONFIG, verdict_keys=public) as client:
        run = client.run("agent-s", session_id=session, on_verdict=got.append)
        d = await run.check("read", {"path": "new.md"})
        assert d.action == "allow"
        never_made = Verdict(
            verdict_id="forged-fresh", action="abort", agent_id="agent-s", session_id=session,
            detector="compaction_loop_persisted", level="critical", count=3, tool_call_id="call_never_made",
            event_ts=time.time(),
        )  # fmt: skip
        own = Verdict(
            verdict_id="own-warn", action="warn", agent_id="agent-s", session_id=session, level="warning",
            detector="generic_repeat", count=10, tool_name="read", tool_call_id=d.call.tool_call_id,
            event_ts=d.call.ts,
        )  # fmt: skip
        # the old abort written again, unchanged; then one for a call never made; then one for this run's call
        await produce(
            tansu,
            names.control,
            [
                replay,
                signed_verdict(signer, names.control, key, never_made),
                signed_verdict(signer, names.control, key, own),
            ],
        )
        await until(lambda: got)  # same key, same partition: the two before it were read first
        assert [v.verdict_id for v in got] == ["own-warn"]
        assert run.aborted is None and client.stats.verdicts_stale >= 2
        d = await run.check("read", {"path": "next.md"})
        assert d.action == "allow" and d.source == "local"


async def test_up_restores_a_saved_record_over_a_mebibyte(tansu):
    # a dead letter of a 1 MiB event is larger than a default producer request: the restore must not stop there
    from loopwarden.devtools.snapshot import Record, Snapshot, Topic, read_broker, write_broker

    topic = f"snapbig-{uuid.uuid4().hex[:8]}"
    big = b"x" * 1_500_000
    records = [Record(0, b"k", b"small-1", 1, []), Record(0, b"k", big, 2, []), Record(0, b"k", b"small-2", 3, [])]
    await write_broker(tansu, Snapshot(topics=[Topic(name=topic, partitions=1, records=records)]))
    back = {t.name: t for t in (await read_broker(tansu)).topics}[topic]
    assert [r.value for r in back.records] == [b"small-1", big, b"small-2"]
