"""The MCP proxy's gate (loopwarden.mcpgate.gate), in-process, with a real LoopClient deciding locally.

The client is not started (no broker): decisions are local, events are counted as not sent.
What is checked here is what the integration tests cannot reach cheaply: an abort refuses the
run's later calls, loopwarden's own failures let calls through (counted, logged once), the
pending bound, the payload bound.
"""

from __future__ import annotations

import asyncio
import logging

import mcp.types as types
import msgspec
import pytest

from loopwarden.mcpgate.gate import ToolGate
from loopwarden.mcpgate.settings import GateSettings
from loopwarden.runner import LoopClient
from loopwarden.schemas.verdicts import Verdict

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 20}}}


def gate(**settings) -> ToolGate:
    return ToolGate(LoopClient(config=CONFIG, bootstrap="127.0.0.1:1"), GateSettings(**settings))


class Server:
    """The wrapped server's tool: counts the calls that reached it."""

    def __init__(self) -> None:
        self.ran = 0

    async def __call__(self) -> types.CallToolResult:
        self.ran += 1
        return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])


def text(result: types.CallToolResult) -> str:
    return result.content[-1].text


async def test_after_an_abort_every_call_of_the_run_is_refused_with_its_text():
    g, server = gate(), Server()
    ref = g.ref("host", "s-1")
    assert not (await g.call(ref, "read", {"p": 1}, server)).is_error
    abort = Verdict(verdict_id="w:0:1:0", action="abort", agent_id="host", session_id="s-1", level="critical")
    abort = msgspec.structs.replace(abort, detector="compaction_loop_persisted", tool_name="read", count=3)
    g.client._on_verdict(ref.key.encode(), abort)
    for args in ({"p": 2}, {"p": 3}):
        result = await g.call(ref, "read", args, server)
        assert result.is_error and text(result).startswith("CRITICAL") and "read" in text(result)
    assert server.ran == 1 and g.stats.refused == 2
    other = await g.call(g.ref("host", "s-2"), "read", {"p": 2}, server)  # another run is untouched
    assert not other.is_error and server.ran == 2


async def test_loopwardens_failure_lets_the_call_through_counted_and_logged_once(caplog, monkeypatch):
    g, server = gate(), Server()

    def broken(value):
        raise RuntimeError("encoder bug")

    monkeypatch.setattr(g.client, "encode", broken)
    with caplog.at_level(logging.ERROR, logger="loopwarden.mcpgate.gate"):
        for _ in range(3):
            assert text(await g.call(g.ref("host", "s"), "read", {}, server)) == "ok"
    assert server.ran == 3 and g.stats.failed_open == 3
    assert len([r for r in caplog.records if "MCP proxy" in r.getMessage()]) == 1


async def test_a_server_error_is_published_and_passed_on():
    g = gate()

    async def boom() -> types.CallToolResult:
        raise ConnectionError("server went away")

    with pytest.raises(ConnectionError):
        await g.call(g.ref("host", "s"), "read", {}, boom)
    assert g.stats.server_errors == 1


async def test_calls_beyond_max_pending_go_through_ungated():
    g = gate(max_pending=1)
    release = asyncio.Event()

    async def slow() -> types.CallToolResult:
        await release.wait()
        return types.CallToolResult(content=[types.TextContent(type="text", text="slow")])

    ref = g.ref("host", "s")
    first = asyncio.create_task(g.call(ref, "read", {}, slow))
    while g._pending == 0:
        await asyncio.sleep(0)
    assert text(await g.call(ref, "read", {}, Server())) == "ok"
    assert g.stats.ungated_overload == 1 and g.client.stats.checks == 1
    release.set()
    assert text(await first) == "slow"


def test_payloads_beyond_the_bound_are_a_digest_and_ids_are_bounded():
    g = gate(max_payload_bytes=64)
    small, big = {"p": "x"}, {"p": "x" * 100}
    assert msgspec.json.decode(g.payload(small)) == small
    digest = msgspec.json.decode(g.payload(big))
    assert set(digest) == {"loopwarden_digest", "bytes"} and digest["bytes"] > 64
    assert g.payload(big) == g.payload({"p": "x" * 100}) != g.payload({"p": "y" * 100})
    ref = g.ref("h" * 1000, "s" * 1000)
    assert len(ref.agent_id) == 256 and len(ref.session_id) == 256
    assert g.ref(None, "s").agent_id == "mcp" and gate(agent_id="bot").ref("host", "s").agent_id == "bot"


@pytest.mark.parametrize(
    "argv",
    [["mcp"], ["mcp", "--url", "http://127.0.0.1:1/mcp", "--", "server"], ["mcp", "--max-runs", "0", "--", "server"]],
)
def test_the_command_refuses_what_it_cannot_serve(argv, capsys):
    from loopwarden.cli import main

    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("loopwarden mcp: ")
