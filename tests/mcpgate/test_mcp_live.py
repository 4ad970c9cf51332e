"""``loopwarden mcp`` publishing to a real worker on Tansu.

The proxy decides locally; its events reach the worker, which audits them and agrees
(nothing on the control topic for the run). The run is the proxy's connection, the agent
the host's name; the refused calls' results are the veto, the verdicts are acknowledged,
and the run ends when the host disconnects.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pyjson5
import pytest

from tests.mcpgate.test_mcp_proxy import CONFIG, TOOL_SERVER, client, proxy, texts
from tests.support.live import collect, ready_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

METRIC = 'loopwarden_runner_decisions_total{agent="other",agreement="same"}'


def topics(names) -> dict[str, str]:
    """The proxy's environment: the runner client on this worker's topics."""
    env = {**os.environ, "LOOPWARDEN_RUNNER_EVENTS_TOPIC": names.events}
    return env | {"LOOPWARDEN_RUNNER_CONTROL_TOPIC": names.control, "LOOPWARDEN_RUNNER_CONFIG_TOPIC": names.config}


@pytest.fixture(scope="module")
def worker(tansu, tmp_path_factory):
    yield from ready_worker(tansu, tmp_path_factory.mktemp("mcp-worker"), "mcp", pyjson5.loads(CONFIG.read_text()))


async def test_the_proxys_events_reach_the_worker_which_agrees(tansu, worker):
    names = worker.names
    env = topics(names)
    async with client(proxy(TOOL_SERVER, bootstrap=tansu, env=env), name="live-host") as c:
        results = [await c.call_tool("echo", {"text": "same"}) for _ in range(22)]
    assert [r.is_error for r in results] == [False] * 20 + [True] * 2
    assert "WARNING" in texts(results[10])[-1]

    await asyncio.to_thread(worker.wait_metric, METRIC, 22)  # every call audited: the same decision
    records = await asyncio.to_thread(collect, tansu, names.events, lambda r: len(r) >= 22 * 2 + 4, 1.0, 30.0)
    events = [json.loads(r.value) for r in records]
    assert {(e["agent_id"], e["session_id"]) for e in events} == {("live-host", events[0]["session_id"])}
    assert events[0]["session_id"].startswith("mcp-")
    calls = [e for e in events if e["type"] == "tool_call"]
    outcomes = [e for e in events if e["type"] == "tool_result"]
    assert [c["params"] for c in calls] == [{"text": "same"}] * 22
    assert [c["decision"]["action"] for c in calls] == ["allow"] * 10 + ["warn"] + ["allow"] * 9 + ["block"] * 2
    assert [o["result"] for o in outcomes[:20]] == [{"content": [{"type": "text", "text": "same"}]}] * 20
    assert [o["result"]["details"]["status"] for o in outcomes[20:]] == ["blocked", "blocked"]  # the veto
    acks = [e["outcome"] for e in events if e["type"] == "verdict_ack"]
    assert acks == ["applied"] * 3  # the warning shown, both blocks obeyed
    assert events[-1]["type"] == "run_end"  # the host went away: the run is over
    control = await asyncio.to_thread(collect, tansu, names.control, lambda r: True, 1.0, 5.0)
    assert control == []  # the worker agreed with every decision: no correction


def rpc(proc: subprocess.Popen, message: dict) -> dict | None:
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline()) if "id" in message else None


async def test_a_proxy_stopped_by_a_signal_ends_its_run(tansu, worker):
    """Hosts stop their MCP servers with SIGINT/SIGTERM: the run still ends on the broker."""
    env = topics(worker.names)
    argv = [sys.executable, "-m", "loopwarden.cli", "mcp", "--config", str(CONFIG), "--bootstrap", tansu]
    proc = subprocess.Popen(
        [*argv, "--", *TOOL_SERVER], env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        hello = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "signalled", "version": "1"},
        }
        assert "result" in rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"name": "echo", "arguments": {"text": "once"}}
        assert rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})["result"]["content"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    records = await asyncio.to_thread(collect, tansu, worker.names.events, lambda r: True, 1.0, 10.0)
    mine = [json.loads(r.value) for r in records if json.loads(r.value)["agent_id"] == "signalled"]
    assert [e["type"] for e in mine] == ["tool_call", "tool_result", "run_end"]
