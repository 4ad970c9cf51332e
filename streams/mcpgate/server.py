"""The wrapped server's connection: frames to and from a command over stdio, or a streamable-HTTP URL.

- a command: its stdin/stdout, newline-delimited frames passed as the bytes they are
  (:func:`read_frames` never holds more than ``limit`` bytes of one frame);
- a URL: the SDK's streamable-HTTP client transport (which owns that wire's sessions,
  headers and event streams; it hands over each frame decoded, so frames from an HTTP server
  are re-encoded, value for value).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any, Protocol

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
            yield item.message.model_dump_json(by_alias=True, exclude_unset=True).encode()

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


def server_of(command: list[str] | None, url: str | None, limit: int) -> Any:
    """A connection to the wrapped server (an async context manager)."""
    if url:
        return UrlServer(url)
    if command:
        return CommandServer(command, limit)
    raise ValueError("give the server's command or its URL")
