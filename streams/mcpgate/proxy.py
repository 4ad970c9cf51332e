"""The MCP proxy's transports: frames between the host and the wrapped server, through a Relay.

The proxy reads only the frames it must decide (:mod:`loopwarden.mcpgate.relay`) and forwards
every other frame as it came. What carries them:

- the host over stdio (what hosts launch): newline-delimited frames on this process's
  stdin/stdout, forwarded byte for byte;
- the host over streamable HTTP (``--http``): :mod:`loopwarden.mcpgate.http`, one server
  connection and one run per host session, each frame the body it is;
- the server: :mod:`loopwarden.mcpgate.server` (a command's stdin/stdout byte for byte, or
  a ``--url`` through the SDK's client transport).

A frame over ``max_frame_bytes`` is never held whole: it is passed on in pieces, undecided.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio

from loopwarden.mcpgate.gate import ToolGate
from loopwarden.mcpgate.http import HttpFront
from loopwarden.mcpgate.relay import Relay
from loopwarden.mcpgate.server import STOP_SECONDS, read_frames, server_of

log = logging.getLogger(__name__)


async def pump(source: AsyncIterator[bytes | bytearray], relay_side: Any, raw_side: Any) -> None:
    """Frames from one side into the relay; pieces of an over-long frame straight to the other side."""
    async for frame in source:
        if isinstance(frame, bytearray):
            await raw_side(frame)
        else:
            await relay_side(frame)


async def serve_stdio(command: list[str] | None, url: str | None, gate: ToolGate) -> None:
    """Serve the host over this process's stdin/stdout (what hosts launch), one run per connection."""
    loop = asyncio.get_running_loop()
    limit = gate.settings.max_frame_bytes
    async with server_of(command, url, limit) as server:
        reader = asyncio.StreamReader(limit=limit)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout.buffer)
        writer = asyncio.StreamWriter(transport, protocol, None, loop)

        async def to_host(frame: bytes) -> None:
            writer.write(frame if isinstance(frame, bytearray) else frame + b"\n")
            await writer.drain()

        relay = Relay(gate, to_host, server.send)
        try:
            async with anyio.create_task_group() as tg:

                async def host_side() -> None:
                    await pump(read_frames(reader, limit), relay.from_host, server.send)
                    # the host closed its end: the server's last answers still reach it, for a bounded time
                    await server.end_input()
                    await anyio.sleep(STOP_SECONDS)
                    tg.cancel_scope.cancel()

                async def server_side() -> None:
                    await pump(server.frames(), relay.from_server, to_host)
                    tg.cancel_scope.cancel()  # the server exited

                tg.start_soon(host_side)
                tg.start_soon(server_side)
        finally:
            relay.close()
            await gate.close()


async def serve_http(
    command: list[str] | None, url: str | None, gate: ToolGate, listener: socket.socket, path: str = "/mcp"
) -> None:
    """Serve streamable HTTP on ``listener`` (bound), at ``path``: one run per host session."""
    import uvicorn

    host = listener.getsockname()[0]
    try:
        async with anyio.create_task_group() as tg:
            app = HttpFront(command, url, gate, host, path, tg)
            config = uvicorn.Config(app, log_level="warning", lifespan="off")
            await uvicorn.Server(config).serve(sockets=[listener])
            tg.cancel_scope.cancel()
    finally:
        await gate.close()
