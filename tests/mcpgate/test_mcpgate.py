"""The MCP proxy's relay and gate (loopwarden.mcpgate), in-process, frames in and frames out, with a real
LoopClient deciding locally.

The client is not started (no broker): decisions are local, events are counted as not sent.
Checked here: what reaches the host, byte for byte, for every shape of result; who a call belongs
to (per connection, per initialize, the 2026-07-28 envelope); an abort refuses the run's later
calls; loopwarden's own failures let calls through (counted, logged once); the bounds; and the
command's one-line errors.
"""

from __future__ import annotations

import json
import logging
import socket
import time

import msgspec
import pytest

from loopwarden.mcpgate.gate import WARNING_KEY, ToolGate
from loopwarden.mcpgate.relay import Relay
from loopwarden.mcpgate.settings import GateSettings
from loopwarden.runner import LoopClient
from loopwarden.schemas.verdicts import Verdict

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 20}}}
WARNING = "[loopwarden] WARNING: You have called echo 10 times"


def gate(**settings) -> ToolGate:
    return ToolGate(LoopClient(config=CONFIG, bootstrap="127.0.0.1:1"), GateSettings(**settings))


class Wire:
    """A relay between a list of frames the host got and a scripted server that answers each call
    with ``result(n)`` (the frame's bytes as a server wrote them) and counts the calls that reached it."""

    def __init__(self, g: ToolGate | None = None, result=None) -> None:
        self.gate = g or gate()
        self.host: list[bytes] = []
        self.ran = 0
        self.result = result or (lambda n: b'{"content": [{"type": "text", "text": "ok"}]}')
        self.relay = Relay(self.gate, self._to_host, self._to_server)
        self.answer = True

    async def _to_host(self, frame: bytes) -> None:
        self.host.append(frame)

    async def _to_server(self, frame: bytes) -> None:
        request = json.loads(frame)
        if isinstance(request, dict) and request.get("method") == "tools/call" and self.answer:
            self.ran += 1
            rid = json.dumps(request["id"]).encode()
            await self.relay.from_server(
                b'{"jsonrpc": "2.0", "id": ' + rid + b', "result": ' + self.result(self.ran) + b"}"
            )

    async def call(self, name: str = "echo", arguments: dict | None = None, rid: int = 1, meta: dict | None = None):
        params: dict = {"name": name, "arguments": arguments if arguments is not None else {"text": "same"}}
        if meta is not None:
            params["_meta"] = meta
        await self.relay.from_host(
            json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}).encode()
        )
        return json.loads(self.host[-1])["result"]

    async def initialize(self, name: str = "host") -> None:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": name, "version": "1"}}
        await self.relay.from_host(
            json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}).encode()
        )


def texts(result: dict) -> list[str]:
    return [item["text"] for item in result["content"] if item.get("type") == "text"]


async def test_an_undecided_response_reaches_the_host_as_the_bytes_the_server_wrote():
    # spaces, key order, a float written 1.10, an escaped character, no isError: what a re-encoding changes
    written = (
        b'{ "structuredContent" : {"ratio": 1.10, "n": 1e3}, "content": [{"text": "caf\\u00e9", "type": "text"}] }'
    )
    wire = Wire(result=lambda n: written)
    for i in range(10):
        await wire.call(arguments={"text": f"step {i}"}, rid=i)
        assert wire.host[-1] == b'{"jsonrpc": "2.0", "id": ' + str(i).encode() + b', "result": ' + written + b"}"


@pytest.mark.parametrize(
    ("shape", "written"),
    [
        ("content", {"content": [{"type": "text", "text": "ok"}]}),
        ("both", {"content": [{"type": "text", "text": '{"jobs": 3}'}], "structuredContent": {"jobs": 3}}),
        ("structured only", {"content": [], "structuredContent": {"jobs": 3}}),
        (
            "2026-07-28",
            {"content": [{"type": "text", "text": "ok"}], "structuredContent": {"jobs": 3}, "resultType": "complete"},
        ),
    ],
)
async def test_a_warning_reaches_the_model_whatever_the_results_shape(shape, written):
    """The 11th identical call carries the warning in content (what most hosts show) and, when there is a
    structuredContent object, in it too (what Claude Code shows); everything else of the result is kept."""
    wire = Wire(result=lambda n: json.dumps(written).encode())
    results = [await wire.call() for _ in range(11)]
    assert results[:10] == [written] * 10
    warned = results[10]
    assert warned["content"][:-1] == written["content"]
    assert warned["content"][-1]["type"] == "text" and warned["content"][-1]["text"].startswith(WARNING)
    if "structuredContent" in written:
        assert warned["structuredContent"] == {
            **written["structuredContent"],
            WARNING_KEY: warned["content"][-1]["text"],
        }
    assert {k: v for k, v in warned.items() if k not in ("content", "structuredContent")} == {
        k: v for k, v in written.items() if k not in ("content", "structuredContent")
    }
    assert wire.gate.stats.warned == 1


async def test_a_tool_whose_output_schema_is_closed_gets_the_warning_in_content_only():
    """A host validates structuredContent against the tool's output schema: a key the schema forbids would
    turn the warned result into an error, so the proxy reads tools/list and leaves such a result's
    structuredContent alone."""
    wire = Wire(result=lambda n: b'{"content": [{"type": "text", "text": "3"}], "structuredContent": {"jobs": 3}}')
    schema = {"type": "object", "properties": {"jobs": {"type": "integer"}}, "additionalProperties": False}
    await wire.relay.from_host(b'{"jsonrpc":"2.0","id":"l1","method":"tools/list"}')
    tools = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}, "outputSchema": schema}]}
    await wire.relay.from_server(json.dumps({"jsonrpc": "2.0", "id": "l1", "result": tools}).encode())
    warned = [await wire.call() for _ in range(11)][-1]
    assert warned["structuredContent"] == {"jobs": 3}
    assert texts(warned)[0] == "3" and texts(warned)[1].startswith(WARNING)


async def test_a_refusal_answers_the_request_id_as_sent_and_the_server_never_sees_it():
    wire = Wire()
    for _ in range(20):
        await wire.call(rid="a-1")
    blocked = await wire.call(rid="a-1")
    assert blocked["isError"] is True and texts(blocked)[0].startswith("CRITICAL: Called echo")
    assert json.loads(wire.host[-1])["id"] == "a-1" and wire.ran == 20


async def test_each_initialize_on_a_connection_starts_a_new_run():
    """A host that re-initializes on one connection starts a new session: the calls before it do not count,
    and the earlier session's run ends."""
    wire = Wire()
    await wire.initialize()
    for _ in range(8):
        await wire.call()
    first = wire.relay.session
    await wire.initialize()
    assert wire.relay.session != first and wire.gate.gate._runs.keys() == set()  # the first run ended
    results = [await wire.call() for _ in range(11)]
    assert [len(r["content"]) for r in results] == [1] * 10 + [2]
    assert [ref.session_id for ref in (run.ref for run in wire.gate.gate._runs.values())] == [wire.relay.session]


async def test_two_connections_are_two_runs_and_the_agent_is_the_hosts_name():
    g = gate()
    first, second = Wire(g), Wire(g)
    await first.initialize("claude-code")
    for _ in range(8):
        await first.call()
    results = [
        await second.call(meta={"io.modelcontextprotocol/clientInfo": {"name": "claude-code"}}) for _ in range(11)
    ]
    assert [len(r["content"]) for r in results] == [1] * 10 + [2]
    runs = {ref.agent_id for ref in (run.ref for run in g.gate._runs.values())}
    assert runs == {"claude-code"} and len(g.gate._runs) == 2


async def test_after_an_abort_every_call_of_the_run_is_refused_with_its_text():
    wire = Wire()
    await wire.initialize()
    assert "isError" not in await wire.call(arguments={"p": 1})
    ref = wire.gate.ref("host", wire.relay.session)
    abort = Verdict(verdict_id="w:0:1:0", action="abort", agent_id="host", session_id=ref.session_id, level="critical")
    abort.event_ts = time.time()  # as a worker's: the time of the event it answers, during this run
    abort = msgspec.structs.replace(abort, detector="compaction_loop_persisted", tool_name="echo", count=3)
    wire.gate.client._on_verdict(ref.key.encode(), abort)
    for args in ({"p": 2}, {"p": 3}):
        result = await wire.call(arguments=args)
        assert result["isError"] is True and texts(result)[0].startswith("CRITICAL") and "echo" in texts(result)[0]
    assert wire.ran == 1 and wire.gate.stats.refused == 2


async def test_loopwardens_failure_lets_the_call_through_counted_and_logged_once(caplog, monkeypatch):
    wire = Wire()

    def broken(value):
        raise RuntimeError("encoder bug")

    monkeypatch.setattr(wire.gate.client, "encode", broken)
    with caplog.at_level(logging.ERROR, logger="loopwarden.mcpgate.gate"):
        for _ in range(3):
            assert texts(await wire.call()) == ["ok"]
    assert wire.ran == 3 and wire.gate.stats.failed_open == 3
    assert len([r for r in caplog.records if "MCP proxy" in r.getMessage()]) == 1


async def test_a_server_error_is_published_and_passed_on_unchanged():
    wire = Wire()
    wire.answer = False
    await wire.relay.from_host(
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}'
    )
    error = b'{"jsonrpc":"2.0","id":7,"error":{"code":-32603,"message":"boom"}}'
    await wire.relay.from_server(error)
    assert wire.host[-1] is error and wire.gate.stats.server_errors == 1 and wire.gate.pending == 0


async def test_calls_beyond_max_pending_go_through_ungated_and_cancelled_calls_are_abandoned():
    wire = Wire(gate(max_pending=1))
    wire.answer = False  # the server does not answer (yet)
    await wire.relay.from_host(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}')
    await wire.relay.from_host(b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}')
    assert wire.gate.stats.ungated_overload == 1 and wire.gate.client.stats.checks == 1
    await wire.relay.from_host(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}')
    assert wire.gate.pending == 0 and wire.gate.stats.abandoned == 1 and not wire.relay.calls


async def test_frames_over_the_bound_and_batches_go_through_undecided():
    wire = Wire(gate(max_frame_bytes=200))
    big = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"t": "x" * 300}}}
    )
    wire.answer = False
    await wire.relay.from_host(big.encode())
    batch = b'[{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}]'
    await wire.relay.from_host(batch)
    assert wire.gate.stats.ungated_frames == 2 and wire.gate.client.stats.checks == 0


def test_payloads_beyond_the_bound_are_a_digest_and_ids_are_bounded():
    g = gate(max_payload_bytes=64)
    small, big = {"p": "x"}, {"p": "x" * 100}
    assert msgspec.json.decode(g.payload(small)) == small
    digest = msgspec.json.decode(g.payload(big))
    size = len(msgspec.json.encode(big))
    assert digest.startswith("[loopwarden digest sha256=") and digest.endswith(f" bytes={size}]")
    assert g.payload(big) == g.payload({"p": "x" * 100}) != g.payload({"p": "y" * 100})
    ref = g.ref("h" * 1000, "s" * 1000)
    assert len(ref.agent_id) == 256 and len(ref.session_id) == 256
    assert g.ref(None, "s").agent_id == "mcp" and gate(agent_id="bot").ref("host", "s").agent_id == "bot"


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


BAD_INPUTS = {
    "no server": (["mcp"], "give the server's command"),
    "command and url": (["mcp", "--url", "http://127.0.0.1:1/mcp", "--", "server"], "one of them"),
    "zero bound": (["mcp", "--max-runs", "0", "--", "server"], "--max-runs"),
    "missing config": (["mcp", "--config", "{tmp}/missing.json5", "--", "server"], "missing.json5"),
    "stray comma": (["mcp", "--config", "{tmp}/comma.json", "--", "server"], "comma.json"),
    "busy port": (["mcp", "--http", "127.0.0.1:{port}", "--", "server"], "--http"),
    "bad address": (["mcp", "--http", "nowhere", "--", "server"], "--http"),
    "no such command": (["mcp", "--", "{tmp}/no-such-server"], "no-such-server"),
    "nothing at the url": (["mcp", "--url", "http://127.0.0.1:{closed}/mcp"], "--url"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_the_command_says_what_is_wrong_in_one_line(case, tmp_path, busy_port, capsys):
    """rc 2, one line on stderr that names the problem and what to change, no traceback."""
    from loopwarden.cli import main

    (tmp_path / "comma.json").write_text('{"tools": {"loopDetection": {,"enabled": true}}}')
    argv, named = BAD_INPUTS[case]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens there once closed
    argv = [a.format(tmp=tmp_path, port=busy_port, closed=closed) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("loopwarden mcp: ")]
    assert len(lines) == 1 and named in lines[0], err
    assert "Traceback" not in err


async def test_a_frame_longer_than_the_bound_passes_in_pieces_that_add_up_to_its_bytes():
    """The stdio reader never holds more than its limit: a longer line comes as pieces (bytearray) that
    carry its own bytes and newline; the lines around it come whole (bytes, no newline)."""
    import asyncio

    from loopwarden.mcpgate.server import read_frames

    long = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"' + b"x" * 1000 + b'"}]}}'
    reader = asyncio.StreamReader(limit=100)
    reader.feed_data(b'{"a":1}\n' + long + b'\n{"b":2}\n{"c":3}')
    reader.feed_eof()
    got = [frame async for frame in read_frames(reader, 100)]
    assert got[0] == b'{"a":1}' and type(got[0]) is bytes
    pieces = [g for g in got if isinstance(g, bytearray)]
    assert len(pieces) > 1 and all(len(p) <= 100 for p in pieces) and b"".join(pieces) == long + b"\n"
    assert got[-2:] == [b'{"b":2}', b'{"c":3}']
