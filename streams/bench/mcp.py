"""``loopwarden bench mcp``: the time ``loopwarden mcp`` adds to one ``tools/call``, against a direct call.

The MCP SDK's client calls the same server (``loopwarden.bench.mcp_server``, one ``echo``
tool) two ways, alternating call by call, over each transport: over stdio directly and through
``loopwarden mcp`` (a subprocess, as a host starts it); over streamable HTTP directly and through
``loopwarden mcp --http`` wrapping the server's ``--url``. The proxy decides locally with the deployment's thresholds
(warn 10, block 20) and publishing its events to an embedded broker (``--no-broker``:
none, events wait in the outbox). Calls are healthy (distinct arguments: every decision
is ``allow``), one at a time. Reported: p50/p99 of each path and of the time added per
call (proxied minus the direct call next to it), in milliseconds, and the calls counted;
then ``gate``: loopwarden's own part of that, the proxy's relay (read the frame, decide, publish,
forward) timed in-process around a server that answers at once, in microseconds.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from loopwarden.bench.stats import percentile

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 20}}}
RESULT = b'{"content":[{"type":"text","text":"ok"}]}'
SERVER = [sys.executable, "-m", "loopwarden.bench.mcp_server"]


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(percentile(ordered, 0.5) * 1000, 3), "p99_ms": round(percentile(ordered, 0.99) * 1000, 3)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(argv: list[str], port: int):
    """A process serving streamable HTTP on ``port`` (its URL), stopped afterwards."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{argv[2:4]} did not start serving on port {port}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def alternate(direct_target: Any, proxied_target: Any, mode: str, calls: int, warmup: int = 50) -> dict[str, Any]:
    """The same calls, one direct and one through the proxy in turn."""
    import mcp.types as types
    from mcp import Client

    def client(target: Any) -> Client:
        return Client(target, mode=mode, cache=None, client_info=types.Implementation(name="bench", version="1"))

    direct_s: list[float] = []
    proxied_s: list[float] = []
    added: list[float] = []
    async with client(direct_target) as direct, client(proxied_target) as proxied:
        for i in range(warmup + calls):
            args = {"text": f"call {i}"}
            t0 = time.perf_counter()
            a = await direct.call_tool("echo", args)
            t1 = time.perf_counter()
            b = await proxied.call_tool("echo", args)
            t2 = time.perf_counter()
            if a.content != b.content or b.is_error:
                raise RuntimeError(f"call {i}: the proxy changed a healthy call's result")
            if i >= warmup:
                direct_s.append(t1 - t0)
                proxied_s.append(t2 - t1)
                added.append((t2 - t1) - (t1 - t0))
        protocol = proxied.protocol_version
    return {"protocol": protocol, "direct": summary(direct_s), "proxied": summary(proxied_s), "added": summary(added)}


async def measure(calls: int, bootstrap: str, config: Path) -> dict[str, Any]:
    """stdio: the server's command, and the proxy around it; http: the server over streamable HTTP, and
    ``loopwarden mcp --http`` around its ``--url``; http_to_command: the same direct call, and
    ``loopwarden mcp --http`` around the server's command (what the host sees is HTTP either way). Over
    HTTP both sides speak the handshake revision (the proxy serves HTTP hosts with a session)."""
    from mcp import StdioServerParameters

    proxy = [sys.executable, "-m", "loopwarden.cli", "mcp", "--config", str(config), "--bootstrap", bootstrap]
    stdio = await alternate(
        StdioServerParameters(command=SERVER[0], args=SERVER[1:]),
        StdioServerParameters(command=proxy[0], args=[*proxy[1:], "--", *SERVER]),
        "auto",
        calls,
    )
    server_port, proxy_port, front_port = free_port(), free_port(), free_port()
    with serving([*SERVER, "--http", str(server_port)], server_port) as server_url:
        with serving([*proxy, "--http", f"127.0.0.1:{proxy_port}", "--url", server_url], proxy_port) as proxy_url:
            http = await alternate(server_url, proxy_url, "legacy", calls)
        with serving([*proxy, "--http", f"127.0.0.1:{front_port}", "--", *SERVER], front_port) as front_url:
            http_to_command = await alternate(server_url, front_url, "legacy", calls)
    return {"calls": calls, "stdio": stdio, "http": http, "http_to_command": http_to_command}


async def gate_only(calls: int) -> dict[str, float]:
    """The proxy's relay in-process (no broker: events are queued and counted) around an instant server:
    a host's tools/call frame in, decided and forwarded; the server's response frame in, published, out."""
    from loopwarden.mcpgate import frames
    from loopwarden.mcpgate.gate import ToolGate
    from loopwarden.mcpgate.relay import Relay
    from loopwarden.runner import LoopClient

    gate = ToolGate(LoopClient(config=CONFIG, bootstrap="127.0.0.1:1"))
    out: list[bytes] = []

    async def to_host(frame: bytes) -> None:
        out.append(frame)

    async def to_server(frame: bytes) -> None:
        head = frames.peek(frame)
        await relay.from_server(b'{"jsonrpc":"2.0","id":%s,"result":%s}' % (head.id, RESULT))

    relay = Relay(gate, to_host, to_server)
    samples = []
    for i in range(calls):
        request = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":%s}}'
        t0 = time.perf_counter()
        await relay.from_host(request % (i, b'{"text":"call %d"}' % i))
        samples.append(time.perf_counter() - t0)
    ordered = sorted(samples)
    return {"p50_us": round(percentile(ordered, 0.5) * 1e6, 1), "p99_us": round(percentile(ordered, 0.99) * 1e6, 1)}


async def bench_mcp(calls: int, broker: bool) -> dict[str, Any]:
    gate = await gate_only(calls)
    with tempfile.TemporaryDirectory(prefix="lw-bench-mcp-") as tmp:
        config = Path(tmp) / "loop.json"
        config.write_text(json.dumps(CONFIG))
        if not broker:
            return {"broker": None, **await measure(calls, "127.0.0.1:1", config), "gate": gate}
        from loopwarden.devtools.broker import EmbeddedBroker
        from loopwarden.kafka.admin import ensure_topics
        from loopwarden.worker.settings import settings_from_flags

        with EmbeddedBroker() as embedded:
            await ensure_topics(settings_from_flags(embedded.url, []))
            return {"broker": "embedded", **await measure(calls, embedded.bootstrap, config), "gate": gate}


def add_arguments(p) -> None:
    p.add_argument("--calls", type=int, default=1000, help="timed calls per path (after 50 untimed)")
    p.add_argument("--no-broker", action="store_true", help="no broker: the proxy's events wait in its outbox")


def run(args) -> int:
    import asyncio

    report = asyncio.run(bench_mcp(args.calls, not args.no_broker))
    print(msgspec.json.format(msgspec.json.encode(report)).decode())
    return 0
