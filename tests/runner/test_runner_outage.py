"""The runner client against a broker that is down at start, or dies mid-run (live, on Tansu).

Each test owns its broker (it is stopped and started), on a fixed port so a
restarted broker is the same address. What is asserted: the client connects
by itself, local decisions are exact throughout, buffered events arrive,
no call waits for a dead broker (every check answers from the client's own
state), and the outage is logged a few times, not per retry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

import pytest

from loopwarden.devtools.broker import EmbeddedBroker, free_port
from loopwarden.runner import LoopClient
from tests.support.live import Names, collect, ensure_topics_of, quick_client, until

pytestmark = pytest.mark.integration

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 12}}}
EXPECTED = ["allow"] * 10 + ["warn", "allow", "block", "block"]


def client_for(port: int, names: Names, **kw) -> LoopClient:
    return quick_client(f"127.0.0.1:{port}", names, **kw)


async def drive(run, n: int) -> list[str]:
    actions = []
    for _ in range(n):
        d = await run.check("read", {"path": "notes.md"})
        assert d.source in ("local", "pending_block"), d
        actions.append(d.action)
        await run.tool_result(d, result=d.blocked_result() if not d.proceed else {"text": "same"})
    return actions


async def test_broker_down_at_start_then_up(tmp_path, caplog):
    port = free_port()
    names = Names("downstart")
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    with caplog.at_level(logging.WARNING):
        client = await asyncio.wait_for(client_for(port, names, config=CONFIG).start(), 10)
        try:
            assert client.local and not client.connected and client.stats.start_errors == 1
            run = client.run("agent-d", run_id=run_id)
            assert await drive(run, 14) == EXPECTED  # enforced exactly with no broker at all
            buffered = client.buffered
            assert buffered > 14
            broker = EmbeddedBroker(port=port, log_path=tmp_path / "tansu.log").start()
            try:
                await ensure_topics_of(broker.bootstrap, names)
                await until(lambda: client.connected and client.buffered == 0)
                assert client.stats.events_sent == buffered and client.stats.events_dropped == 0
                await until(lambda: client.listening)
                records = await asyncio.to_thread(
                    collect, broker.bootstrap, names.events, lambda recs: len(recs) >= buffered, 1.0
                )
                events = {e["event_id"]: e for e in (json.loads(r.value) for r in records)}  # resends: once
                calls = [e for e in events.values() if e["type"] == "tool_call"]
                assert [c["decision"]["action"] for c in calls] == EXPECTED
                assert all(not c.get("await_decision") for c in calls)
            finally:
                await client.close()
                broker.stop()
        finally:
            await client.close()
    ours = [r for r in caplog.records if r.name.startswith(("loopwarden", "aiokafka"))]
    assert len(ours) <= 20, [r.getMessage() for r in ours]
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def test_broker_killed_mid_run_no_call_waits(tmp_path, caplog):
    port = free_port()
    names = Names("killmid")
    broker = EmbeddedBroker(port=port, log_path=tmp_path / "tansu.log").start()
    with caplog.at_level(logging.WARNING):
        try:
            await ensure_topics_of(broker.bootstrap, names)
            async with client_for(port, names, config=CONFIG) as client:
                assert client.connected and client.listening
                run = client.run("agent-k", run_id=f"r-{uuid.uuid4().hex[:8]}")
                assert await drive(run, 2) == EXPECTED[:2]
                await until(lambda: client.buffered == 0)
                await broker.astop()
                # each check answers from the client itself: the same decisions, nothing waits on the broker
                assert await drive(run, 12) == EXPECTED[2:]
                await until(lambda: not client.connected or client.buffered > 0)
                # a worker-mode client on the dead broker answers at once once it knows, never hangs
                gate = client_for(port, names, decisions="worker")
                await asyncio.wait_for(gate.start(), 10)
                d = await gate.run("agent-k", run_id="other").check("read", {})
                assert (d.action, d.source) == ("allow", "offline")
                await gate.close()
                await asyncio.sleep(3)  # an outage of some seconds: aiokafka retries ~10 times a second
                # the broker comes back (empty: memory storage): the client reconnects and delivers the rest
                broker = EmbeddedBroker(port=port, log_path=tmp_path / "tansu2.log").start()
                await ensure_topics_of(broker.bootstrap, names)
                await until(lambda: client.connected and client.buffered == 0)
        finally:
            broker.stop()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
    ours = [r for r in caplog.records if r.name.startswith(("loopwarden", "aiokafka"))]
    assert len(ours) <= 30, [r.getMessage() for r in ours]


async def test_local_decisions_follow_the_config_topic_from_start_and_live(tansu):
    from tests.support.live import produce

    names = Names("cfglocal")
    await ensure_topics_of(tansu, names)
    block = {"enabled": True, "warningThreshold": 10, "criticalThreshold": 12}
    await produce(tansu, names.config, [(b"*", json.dumps(block).encode())])
    # no config file: the topic alone (read in full before start() returns) decides
    async with client_for(int(tansu.rsplit(":", 1)[1]), names, decisions="local") as client:
        assert client.local and client.fleet.resolve("agent-c").enabled
        run = client.run("agent-c", run_id=f"r-{uuid.uuid4().hex[:8]}")
        assert await drive(run, 14) == EXPECTED
        # live: the agent's own record turns detection off for it
        await produce(tansu, names.config, [(b"agent-c", json.dumps({"enabled": False}).encode())])
        await until(lambda: not client.fleet.resolve("agent-c").enabled)
        fresh = client.run("agent-c", run_id=f"r-{uuid.uuid4().hex[:8]}")
        assert set(await drive(fresh, 14)) == {"allow"}
