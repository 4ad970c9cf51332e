"""``loopwarden bench mcp``: the time ``loopwarden mcp`` adds to one ``tools/call``, against a direct call.

The MCP SDK's client calls the same server (``loopwarden.bench.mcp_server``, one ``echo``
tool) two ways, alternating call by call: directly over stdio, and through ``loopwarden mcp``
(a subprocess, as a host starts it) deciding locally with the deployment's thresholds
(warn 10, block 20) and publishing its events to an embedded broker (``--no-broker``:
none, events wait in the outbox). Calls are healthy (distinct arguments: every decision
is ``allow``), one at a time. Reported: p50/p99 of each path and of the time added per
call (proxied minus the direct call next to it), in milliseconds, and the calls counted;
then ``gate``: loopwarden's own part of that, the proxy's gate (decide, publish, annotate)
timed in-process around a tool that returns at once, in microseconds.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from loopwarden.bench.stats import percentile
from loopwarden.mcpgate import frames

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 20}}}
RESULT = b'{"content":[{"type":"text","text":"ok"}]}'
SERVER = [sys.executable, "-m", "loopwarden.bench.mcp_server"]


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(percentile(ordered, 0.5) * 1000, 3), "p99_ms": round(percentile(ordered, 0.99) * 1000, 3)}


async def measure(calls: int, bootstrap: str, config: Path, warmup: int = 50) -> dict[str, Any]:
    import mcp.types as types
    from mcp import Client, StdioServerParameters

    def client(command: list[str]) -> Client:
        params = StdioServerParameters(command=command[0], args=command[1:])
        return Client(params, mode="auto", cache=None, client_info=types.Implementation(name="bench", version="1"))

    proxy = [sys.executable, "-m", "loopwarden.cli", "mcp", "--config", str(config), "--bootstrap", bootstrap]
    direct_s: list[float] = []
    proxied_s: list[float] = []
    added: list[float] = []
    async with client(SERVER) as direct, client([*proxy, "--", *SERVER]) as proxied:
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
    return {
        "calls": calls,
        "protocol": protocol,
        "direct": summary(direct_s),
        "proxied": summary(proxied_s),
        "added": summary(added),
    }


async def gate_only(calls: int) -> dict[str, float]:
    """The proxy's relay in-process (no broker: events are queued and counted) around an instant server:
    a host's tools/call frame in, decided and forwarded; the server's response frame in, published, out."""
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
