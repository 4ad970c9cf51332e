"""``loopwarden mcp`` driven by the MCP SDK's own client, around real MCP servers over stdio.

The servers: an in-test server on the SDK's low-level ``Server`` (tools, a resource, a prompt),
a hand-written server that speaks only the 2024-11-05 revision, and the reference
``@modelcontextprotocol/server-filesystem`` from npm, run with node. The proxy is the real
command (a subprocess), with the deployment's config (warn at 10 identical calls, block at 20).
The broker is absent here (events wait in the outbox); test_mcp_live.py has the worker.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import mcp.types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.hosts.install import MCP_FILESYSTEM, bin_path

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "deploy" / "config" / "loopwarden.json5"
DRIVERS = Path(__file__).resolve().parents[1] / "support" / "drivers"
TOOL_SERVER = [sys.executable, str(DRIVERS / "mcp_tool_server.py")]
OLD_SERVER = [sys.executable, str(DRIVERS / "mcp_old_server.py")]
NO_BROKER = "127.0.0.1:1"


def proxy(server: list[str], *flags: str, bootstrap: str = NO_BROKER, env: dict | None = None) -> StdioServerParameters:
    target = server if server[:1] == ["--url"] else ["--", *server]  # a command, or ["--url", URL]
    args = ["-m", "loopwarden.cli", "mcp", "--config", str(CONFIG), "--bootstrap", bootstrap, *flags, *target]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(REPO))


def direct(server: list[str]) -> StdioServerParameters:
    return StdioServerParameters(command=server[0], args=server[1:], cwd=str(REPO))


def client(target, name: str = "test-host", mode: str = "auto") -> Client:
    return Client(target, mode=mode, cache=None, client_info=types.Implementation(name=name, version="1"))


def texts(result: types.CallToolResult) -> list[str]:
    return [item.text for item in result.content if isinstance(item, types.TextContent)]


async def loop(c: Client, tool: str, args: dict, n: int) -> list[types.CallToolResult]:
    return [await c.call_tool(tool, args) for _ in range(n)]


def assert_warned_at_10_blocked_at_20(results: list[types.CallToolResult], tool: str, plain: list[str]) -> None:
    """Calls 1-10 untouched; the 11th (10 identical calls before it) carries the warning as one more
    text item; calls 12-20 untouched; the 21st and later are refused with the block's text."""
    for i in [*range(10), *range(11, 20)]:
        assert not results[i].is_error and texts(results[i]) == plain, i
    warned = texts(results[10])
    assert warned[:-1] == plain and not results[10].is_error
    assert warned[-1].startswith("[loopwarden] WARNING:") and f"called {tool} 10 times" in warned[-1]
    for blocked in results[20:]:
        assert blocked.is_error
        assert texts(blocked) == [
            f"CRITICAL: Called {tool} with identical arguments and identical outcomes 20 times. "
            "Session execution blocked to prevent runaway loops."
        ]


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # the 2026-07-28 revision, and the initialize handshake
async def test_a_looping_client_is_warned_at_10_blocked_at_20_and_sees_why(mode):
    async with client(proxy(TOOL_SERVER), mode=mode) as c:
        assert c.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        results = await loop(c, "echo", {"text": "same"}, 22)
        assert_warned_at_10_blocked_at_20(results, "echo", ["same"])
        ran = await c.call_tool("count", {})
        assert texts(ran) == ["20"]  # the refused calls never reached the server


async def test_a_healthy_client_is_never_touched_and_everything_passes_through():
    async with client(direct(TOOL_SERVER)) as d:
        tools, resources, prompts = await d.list_tools(), await d.list_resources(), await d.list_prompts()
        note, greet = await d.read_resource("mem://note"), await d.get_prompt("greet")
    async with client(proxy(TOOL_SERVER)) as c:
        assert c.server_info.name == "tool-server"
        assert (await c.list_tools()).tools == tools.tools
        assert (await c.list_resources()).resources == resources.resources
        assert (await c.list_prompts()).prompts == prompts.prompts
        assert (await c.read_resource("mem://note")).contents == note.contents
        assert (await c.get_prompt("greet")).messages == greet.messages
        for i in range(45):  # progress: a different call each time, past every threshold
            result = await c.call_tool("echo", {"text": f"step {i}"})
            assert not result.is_error and texts(result) == [f"step {i}"]
        failed = await c.call_tool("fail", {})  # the server's own tool error, unchanged
        assert failed.is_error and texts(failed) == ["disk on fire"]
        with pytest.raises(MCPError, match="boom"):  # and its protocol error
            await c.call_tool("boom", {})
        assert texts(await c.call_tool("count", {})) == ["47"]


async def test_the_agent_id_is_the_clients_name_unless_configured():
    """`ops-monitor` has thresholds 20/40 in the config: a host of that name is warned only after 20 calls."""
    async with client(proxy(TOOL_SERVER), name="ops-monitor") as c:
        results = await loop(c, "echo", {"text": "x"}, 21)
        assert [len(r.content) for r in results] == [1] * 20 + [2]
    async with client(proxy(TOOL_SERVER, "--agent-id", "support-bot"), name="ops-monitor") as c:
        results = await loop(c, "echo", {"text": "x"}, 11)
        assert [len(r.content) for r in results] == [1] * 10 + [2]


async def test_large_arguments_are_judged_by_their_digest():
    """Beyond --max-payload-bytes a call's arguments are published and hashed as a digest: a loop of
    large identical calls is still one, different large calls are not."""
    big = "x" * 4096
    async with client(proxy(TOOL_SERVER, "--max-payload-bytes", "256")) as c:
        varied = [await c.call_tool("echo", {"text": big + str(i)}) for i in range(12)]
        assert all(len(r.content) == 1 for r in varied)
        results = await loop(c, "echo", {"text": big}, 21)
        assert_warned_at_10_blocked_at_20(results, "echo", [big])


async def test_a_server_of_an_older_revision():
    async with client(proxy(OLD_SERVER)) as c:
        assert [t.name for t in (await c.list_tools()).tools] == ["echo"]
        assert c.server_info.name == "old"
        results = await loop(c, "echo", {"text": "again"}, 21)
        assert_warned_at_10_blocked_at_20(results, "echo", ["again"])


async def test_the_reference_filesystem_server_from_npm(tmp_path):
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(f"content of {name}\n")
    server = [str(bin_path(MCP_FILESYSTEM, "mcp-server-filesystem")), str(tmp_path)]
    async with client(direct(server)) as d:
        tools = (await d.list_tools()).tools
        listing = texts(await d.call_tool("list_directory", {"path": str(tmp_path)}))
    # the server speaks 2025-11-25: a host on the same revision gets its tools field for field (a 2026-07-28
    # host gets them in its revision's form, which has no `execution`)
    async with client(proxy(server), mode="legacy") as c:
        assert (await c.list_tools()).tools == tools
        for i in range(8):  # a few reads, below every threshold: untouched
            name = ("a.txt", "b.txt")[i % 2]
            read = await c.call_tool("read_text_file", {"path": str(tmp_path / name)})
            assert texts(read) == [f"content of {name}\n"] and not read.is_error
        results = await loop(c, "list_directory", {"path": str(tmp_path)}, 21)
        assert_warned_at_10_blocked_at_20(results, "list_directory", listing)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(argv: list[str], port: int, log_path: Path) -> Iterator[str]:
    """A process serving streamable HTTP on ``port``: its URL while it runs."""
    log = log_path.open("w")
    proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:  # a hang guard while the process starts, not a timing assertion
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def http_proxy(port: int, *server: str) -> list[str]:
    argv = [sys.executable, "-m", "loopwarden.cli", "mcp", "--config", str(CONFIG), "--bootstrap", NO_BROKER]
    return [*argv, "--http", f"127.0.0.1:{port}", *server]


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # the SDK's default client (it probes 2026-07-28 first)
async def test_over_http_each_session_is_its_own_run(mode, tmp_path):
    """Two host sessions on one proxy: the healthy one is not blocked by the other's loop. The
    2026-07-28 revision carries no session on HTTP: the proxy does not offer it there, and the SDK's
    default client falls back to the handshake, whose session is the run."""
    port = free_port()
    with serving(http_proxy(port, "--", *TOOL_SERVER), port, tmp_path / "proxy.log") as url:
        async with client(url, mode=mode) as first, client(url, mode=mode) as second:
            assert first.protocol_version == second.protocol_version == "2025-11-25"
            a = await loop(first, "echo", {"text": "same"}, 8)
            b = await loop(second, "echo", {"text": "same"}, 11)  # one run would warn at its 3rd call
            assert [len(r.content) for r in a] == [1] * 8
            assert [len(r.content) for r in b] == [1] * 10 + [2]


def rpc(http: httpx.Client, url: str, message: dict, session: str | None = None, version: str | None = None):
    """One JSON-RPC message POSTed as a host does: the answer (JSON or one SSE event) and the session header."""
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    if session:
        headers["mcp-session-id"] = session
    if version:
        headers["mcp-protocol-version"] = version
    reply = http.post(url, json=message, headers=headers)
    assert reply.status_code < 300, reply.text
    data = [line[5:].strip() for line in reply.text.splitlines() if line.startswith("data:")]
    body = json.loads(data[-1]) if data else (reply.json() if reply.content else None)
    return body, reply.headers.get("mcp-session-id")


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18"])
def test_over_http_each_older_handshake_revision_keeps_sessions_apart(version, tmp_path):
    """The SDK's client speaks only the newest handshake; older revisions are spoken here as their
    hosts speak them (initialize with the revision, then its session header on every request)."""
    port = free_port()
    with serving(http_proxy(port, "--", *TOOL_SERVER), port, tmp_path / "proxy.log") as url, httpx.Client() as http:
        sessions = []
        for name in ("first", "second"):
            params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": name, "version": "1"}}
            init, session = rpc(http, url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
            assert init["result"]["protocolVersion"] == version and session
            rpc(http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session, version)
            sessions.append(session)

        def calls(session: str, n: int) -> list[int]:
            call = {"name": "echo", "arguments": {"text": "same"}}
            messages = [{"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": call} for i in range(n)]
            return [len(rpc(http, url, m, session, version)[0]["result"]["content"]) for m in messages]

        assert calls(sessions[0], 8) == [1] * 8
        assert calls(sessions[1], 11) == [1] * 10 + [2]


def raw_exchange(argv: list[str], frames: list[bytes]) -> list[bytes]:
    """The frames a host writes, each on its line, and the lines it reads back, byte for byte."""
    done = subprocess.run(argv, input=b"".join(f + b"\n" for f in frames), capture_output=True, cwd=REPO, timeout=120)
    return done.stdout.splitlines()


@pytest.mark.parametrize("flags", [[], ["--max-frame-bytes", "4096"]])  # the 70 KB frames whole, or in pieces
def test_an_undecided_result_reaches_the_host_byte_for_byte(flags):
    """The hand-written server writes its frames with Python's json.dumps (spaces after separators, its own
    key order, escaped non-ASCII, no isError): through the proxy the host reads the same bytes, also
    for frames over --max-frame-bytes, which pass in pieces."""
    init = {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    frames = [json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}).encode()]
    frames.append(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    frames.append(b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}')
    for i, text in enumerate(["caf\u00e9 1.10", "x" * 70_000, "line\nbreak"]):
        call = {"name": "echo", "arguments": {"text": text}}
        frames.append(json.dumps({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call", "params": call}).encode())
    direct_lines = raw_exchange(OLD_SERVER, frames)
    proxied_lines = raw_exchange([sys.executable, *proxy(OLD_SERVER, *flags).args], frames)
    assert len(direct_lines) == 5 and b'"isError"' not in b"".join(direct_lines)
    assert proxied_lines == direct_lines


@pytest.mark.parametrize(("tool", "in_structured"), [("jobs", True), ("jobs_closed", False)])
async def test_a_warning_reaches_the_model_in_structured_content_too(tool, in_structured):
    """Claude Code hands the model structuredContent when there is one: the warning is in it too, unless
    the tool's output schema forbids other keys (the host would reject the result): then only in content."""
    async with client(proxy(TOOL_SERVER)) as c:
        await c.list_tools()
        results = await loop(c, tool, {}, 11)
    assert all(r.structured_content == {"jobs": 3} and texts(r) == ['{"jobs": 3}'] for r in results[:10])
    warned = results[10]
    assert texts(warned)[0] == '{"jobs": 3}' and texts(warned)[1].startswith("[loopwarden] WARNING:")
    expected = {"jobs": 3, "loopwarden_warning": texts(warned)[1]} if in_structured else {"jobs": 3}
    assert warned.structured_content == expected and not warned.is_error


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_server_over_http_behind_either_front(mode, tmp_path):
    """--url: the wrapped server over streamable HTTP, behind the stdio front and behind the HTTP front."""
    server_port, proxy_port = free_port(), free_port()
    server = [*TOOL_SERVER, "--http", str(server_port)]
    with serving(server, server_port, tmp_path / "server.log") as server_url:
        async with client(proxy(["--url", server_url]), mode=mode) as c:
            results = await loop(c, "echo", {"text": "same"}, 21)
            assert_warned_at_10_blocked_at_20(results, "echo", ["same"])
        with serving(http_proxy(proxy_port, "--url", server_url), proxy_port, tmp_path / "proxy.log") as url:
            async with client(url, mode=mode) as first, client(url, mode=mode) as second:
                a = await loop(first, "echo", {"text": "same"}, 8)
                b = await loop(second, "echo", {"text": "same"}, 11)
                assert [len(r.content) for r in a] == [1] * 8
                assert [len(r.content) for r in b] == [1] * 10 + [2]


async def test_over_http_a_new_session_beyond_the_bound_ends_the_least_recently_used(tmp_path):
    """Hosts that leave without ending their session never lock the next ones out: with --max-sessions 1
    the second session ends the first (its host gets an error and would start anew)."""
    port = free_port()
    with serving(http_proxy(port, "--max-sessions", "1", "--", *TOOL_SERVER), port, tmp_path / "proxy.log") as url:
        async with client(url, mode="legacy") as first:
            assert texts(await first.call_tool("echo", {"text": "a"})) == ["a"]
            async with client(url, mode="legacy") as second:
                results = await loop(second, "echo", {"text": "same"}, 11)
                assert [len(r.content) for r in results] == [1] * 10 + [2]
                with pytest.raises(Exception):  # noqa: B017 - the SDK names a lost session in several ways
                    await first.call_tool("echo", {"text": "a"})


def test_over_http_an_undecided_result_is_the_servers_bytes_and_a_foreign_host_header_is_refused(tmp_path):
    """Over HTTP a POSTed request's answer is the server's response frame as the body, the bytes it wrote
    (spaces, escapes, no isError added); a body over --max-frame-bytes is refused. And DNS-rebinding
    protection: a request naming another Host is refused."""
    init = {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "é"}}}
    opening = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
    direct_lines = raw_exchange(OLD_SERVER, [json.dumps(m).encode() for m in (opening, call)])
    port = free_port()
    proxy_argv = http_proxy(port, "--max-frame-bytes", "65536", "--", *OLD_SERVER)
    with serving(proxy_argv, port, tmp_path / "proxy.log") as url, httpx.Client() as http:
        _, session = rpc(http, url, opening)
        headers = {"accept": "application/json, text/event-stream", "mcp-session-id": session}
        answer = http.post(url, content=json.dumps(call).encode(), headers=headers)
        assert answer.status_code == 200 and answer.content == direct_lines[-1]
        assert b'"isError"' not in answer.content and b"\\u00e9" in answer.content
        big = {**call, "params": {"name": "echo", "arguments": {"text": "x" * 70_000}}}
        assert http.post(url, json=big, headers=headers).status_code == 413  # over --max-frame-bytes
        foreign = http.post(url, json=call, headers={"host": "evil.example", "mcp-session-id": session})
        assert foreign.status_code in (400, 403, 421)


def test_a_proxy_told_of_no_broker_contacts_none():
    """As the decision service: without ``--bootstrap`` or ``LOOPWARDEN_RUNNER_BOOTSTRAP`` the proxy
    decides locally and never tries a broker (``up``'s default one may be another developer's stack);
    it used to try 127.0.0.1:19092 and log aiokafka errors at every start."""
    init = {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    frames = [json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}).encode()]
    frames.append(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    for i in range(12):
        call = {"name": "echo", "arguments": {"text": "same"}}
        frames.append(json.dumps({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call", "params": call}).encode())
    env = {k: v for k, v in os.environ.items() if k != "LOOPWARDEN_RUNNER_BOOTSTRAP"}
    argv = [sys.executable, "-m", "loopwarden.cli", "mcp", "--config", str(CONFIG), "--", *OLD_SERVER]
    done = subprocess.run(
        argv, input=b"".join(f + b"\n" for f in frames), capture_output=True, cwd=REPO, timeout=120, env=env
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == 13 and "WARNING" in json.dumps(answers[11])  # the 11th call: decided locally all the same
    log = done.stderr.decode()
    assert "aiokafka" not in log and "19092" not in log and "Unable connect" not in log, log
