"""The MCP proxy's transports: frames between the host and the wrapped server, through a Relay.

The proxy reads only the frames it must decide (:mod:`loopwarden.mcpgate.relay`) and forwards
every other frame as it came. What carries them:

- the host over stdio (what hosts launch): newline-delimited frames on this process's
  stdin/stdout, forwarded byte for byte;
- the host over streamable HTTP (``--http``): the SDK's server transport, one per host session
  (``Mcp-Session-Id``), each session with its own connection to the wrapped server and its own
  run. The 2026-07-28 revision carries no session on HTTP, so the proxy does not offer it
  there: a host that probes it (``server/discover``) is told the revisions it serves and falls
  back to the ``initialize`` handshake, which has a session (streams/mcpgate/MCP.md);
- the server started as a command: its stdin/stdout, frames byte for byte;
- the server at ``--url``: the SDK's streamable-HTTP client transport (which owns that wire's
  sessions, headers and event streams; it hands over each frame decoded, so frames from an
  HTTP server are re-encoded, value for value).

A frame over ``max_frame_bytes`` is never held whole: it is passed on in pieces, undecided.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any, Protocol

import anyio

from loopwarden.mcpgate.gate import ToolGate
from loopwarden.mcpgate.relay import Relay

log = logging.getLogger(__name__)

STOP_SECONDS = 2.0  # what a server gets to exit after its stdin closes, before it is terminated


class Server(Protocol):
    """One connection to the wrapped server."""

    async def send(self, frame: bytes) -> None: ...
    def frames(self) -> AsyncIterator[bytes | bytearray]: ...
    async def end_input(self) -> None: ...


async def read_frames(reader: asyncio.StreamReader, limit: int) -> AsyncIterator[bytes | bytearray]:
    """Newline-delimited frames without their newline (``bytes``); a frame longer than ``limit`` (the
    reader's) comes as pieces of at most ``limit`` bytes that carry its own bytes, the newline too
    (``bytearray``), so no frame is ever held whole."""
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as end:
            if end.partial.strip():
                yield bytes(end.partial)
            return
        except asyncio.LimitOverrunError as over:
            yield bytearray(await reader.readexactly(min(over.consumed, limit)))
            while True:  # the rest of the long frame, through its newline, in pieces
                try:
                    yield bytearray(await reader.readuntil(b"\n"))
                    break
                except asyncio.LimitOverrunError as more:
                    yield bytearray(await reader.readexactly(min(more.consumed, limit)))
                except asyncio.IncompleteReadError as end:
                    yield bytearray(end.partial)
                    return
            continue
        yield line[:-1]


class CommandServer:
    """The wrapped server as a subprocess (the proxy's environment and working directory, as a host starts it)."""

    def __init__(self, command: list[str], limit: int) -> None:
        self.command = command
        self.limit = limit
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> CommandServer:
        self.proc = await asyncio.create_subprocess_exec(
            *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=self.limit
        )
        return self

    async def send(self, frame: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(frame if isinstance(frame, bytearray) else frame + b"\n")
        await self.proc.stdin.drain()

    def frames(self) -> AsyncIterator[bytes | bytearray]:
        assert self.proc is not None and self.proc.stdout is not None
        return read_frames(self.proc.stdout, self.limit)

    async def end_input(self) -> None:
        """No more frames for the server (it exits on its own, as it does when a host leaves)."""
        if self.proc is not None and self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()

    async def __aexit__(self, *exc: Any) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            await asyncio.wait_for(proc.wait(), STOP_SECONDS)
        except (TimeoutError, OSError):
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), STOP_SECONDS)
            except TimeoutError:
                proc.kill()


class UrlServer:
    """The wrapped server over streamable HTTP, through the SDK's client transport."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> UrlServer:
        from mcp.client.streamable_http import streamable_http_client

        self.read, self.write = (await self._stack.enter_async_context(streamable_http_client(self.url)))[:2]
        return self

    async def send(self, frame: bytes) -> None:
        message = session_message(frame)
        if message is not None:
            await self.write.send(message)

    async def frames(self) -> AsyncIterator[bytes]:
        async for item in self.read:
            if isinstance(item, Exception):
                log.warning("the wrapped server's transport: %s", item)
                continue
            yield encode_message(item.message)

    async def end_input(self) -> None:
        await self.write.aclose()

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self._stack.aclose()
        except Exception as error:  # noqa: BLE001 - the server went away; the host has its answers or errors
            log.warning("the wrapped server's transport closed with an error: %r", error)


def session_message(frame: bytes) -> Any:
    """A frame as the SDK's transports take it; None (logged, dropped) when it is no JSON-RPC message:
    those transports carry messages, not bytes."""
    import pydantic
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(bytes(frame)))
    except pydantic.ValidationError:
        log.warning("dropped a frame that is no JSON-RPC message (%d bytes)", len(frame))
        return None


def encode_message(message: Any) -> bytes:
    return message.model_dump_json(by_alias=True, exclude_unset=True).encode()


def server_of(command: list[str] | None, url: str | None, limit: int) -> Any:
    """A connection to the wrapped server (an async context manager)."""
    if url:
        return UrlServer(url)
    if command:
        return CommandServer(command, limit)
    raise ValueError("give the server's command or its URL")


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


# --- the host over streamable HTTP ------------------------------------------------------------


def unsupported_revision() -> bytes:
    """The answer to a 2026-07-28 request over HTTP: the revisions served (all with a session)."""
    from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    error = {
        "code": UNSUPPORTED_PROTOCOL_VERSION,
        "message": "this proxy serves HTTP hosts with a session (the initialize handshake)",
        "data": {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS)},
    }
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()


class HttpFront:
    """An ASGI app: one SDK server transport, one server connection and one relay per host session."""

    def __init__(
        self, command: list[str] | None, url: str | None, gate: ToolGate, host: str, path: str, tg: Any
    ) -> None:
        from mcp.server.transport_security import TransportSecuritySettings

        self.command, self.url, self.gate, self.path, self.tg = command, url, gate, path, tg
        self.sessions: OrderedDict[str, Any] = OrderedDict()  # least recently used first
        loopback = host in ("127.0.0.1", "localhost", "::1")
        self.security = (
            TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
            if loopback
            else None
        )

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        from mcp.server.streamable_http import MCP_PROTOCOL_VERSION_HEADER, MCP_SESSION_ID_HEADER
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
        from starlette.requests import Request
        from starlette.responses import Response

        if scope["type"] != "http" or scope["path"].rstrip("/") != self.path.rstrip("/"):
            await Response("not found", 404)(scope, receive, send)
            return
        request = Request(scope, receive)
        version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
        session_id = request.headers.get(MCP_SESSION_ID_HEADER)
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS and session_id is None:
            answer = Response(unsupported_revision(), 400, media_type="application/json")
            await answer(scope, receive, send)
            return
        if session_id is not None:
            transport = self.sessions.get(session_id)
            if transport is None:
                await Response("session not found", 404)(scope, receive, send)
                return
            self.sessions.move_to_end(session_id)
            await transport.handle_request(scope, receive, send)
            if transport.is_terminated:
                self.sessions.pop(session_id, None)
            return
        while len(self.sessions) >= self.gate.settings.max_sessions:
            # hosts that went away without ending their session must not lock new ones out: the least
            # recently used session ends (its host gets 404 and starts a new one, as the spec says)
            _old_id, old = self.sessions.popitem(last=False)
            await old.terminate()
        transport = await self._open()
        await transport.handle_request(scope, receive, send)

    async def _open(self) -> Any:
        from mcp.server.streamable_http import StreamableHTTPServerTransport

        session_id = uuid.uuid4().hex
        transport = StreamableHTTPServerTransport(mcp_session_id=session_id, security_settings=self.security)
        self.sessions[session_id] = transport
        await self.tg.start(self._serve, session_id, transport)
        return transport

    async def _serve(self, session_id: str, transport: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """One host session: its frames through a relay to its own server connection."""
        from mcp.shared.message import ServerMessageMetadata, SessionMessage
        from mcp_types import JSONRPCError, JSONRPCResponse

        limit = self.gate.settings.max_frame_bytes
        try:
            async with transport.connect() as (read, write), server_of(self.command, self.url, limit) as server:
                task_status.started()

                async def to_host(frame: bytes) -> None:
                    parsed = session_message(frame)
                    if parsed is None:
                        return
                    message = parsed.message
                    related = None
                    if isinstance(message, (JSONRPCResponse, JSONRPCError)):
                        related = message.id
                    metadata = ServerMessageMetadata(related_request_id=related) if related is not None else None
                    await write.send(SessionMessage(message, metadata=metadata))

                relay = Relay(self.gate, to_host, server.send, session=f"mcp-{session_id}")
                try:
                    async with anyio.create_task_group() as tg:

                        async def host_side() -> None:
                            async for item in read:
                                if isinstance(item, Exception):
                                    continue
                                await relay.from_host(encode_message(item.message))
                            tg.cancel_scope.cancel()

                        async def server_side() -> None:
                            # the SDK's transport takes whole messages: an over-long frame is joined, undecided
                            long = bytearray()
                            async for frame in server.frames():
                                if isinstance(frame, bytearray):
                                    long += frame
                                    if long.endswith(b"\n"):
                                        await to_host(bytes(long))
                                        long.clear()
                                else:
                                    await relay.from_server(frame)
                            tg.cancel_scope.cancel()

                        tg.start_soon(host_side)
                        tg.start_soon(server_side)
                finally:
                    relay.close()
                    await self.gate.gate.end(self.gate.ref(relay.client_name, relay.session))
        except Exception:  # noqa: BLE001 - one session's trouble never ends the proxy
            log.exception("MCP session %s ended with an error", session_id[:16])
        finally:
            self.sessions.pop(session_id, None)


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
