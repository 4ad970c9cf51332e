"""The proxy's streamable-HTTP front: host sessions over HTTP, frames passed as the bodies they are.

Each host session (``initialize`` without ``Mcp-Session-Id``) gets its own id, its own
connection to the wrapped server (a process, for a command) and its own
:class:`~loopwarden.mcpgate.relay.Relay`, so its own run. What the host sends and reads:

- ``POST`` a request: the answer is the server's response frame as the body
  (``application/json``), the bytes the server wrote (or the proxy's refusal/warned result);
- ``POST`` a notification or a response: ``202``, the frame forwarded;
- ``GET``: an event stream (SSE) of the server's frames that answer no open ``POST``
  (notifications, progress, its requests to the host); without one they are dropped, counted;
- ``DELETE``: the session ends (its server connection closes, its run ends).

The 2026-07-28 revision has no session on HTTP (each request stands alone), so a request of it
that comes without a session is answered "unsupported protocol version" naming the handshake
revisions, and hosts fall back to ``initialize`` (streams/mcpgate/MCP.md). On a loopback address
the ``Host`` and ``Origin`` headers must name loopback too (DNS-rebinding protection).
Bounds: a body over ``max_frame_bytes`` is refused (413), at most ``max_sessions`` sessions (a
new one ends the least recently used), at most ``MAX_QUEUED`` frames wait for a ``GET`` stream.
"""

from __future__ import annotations

import fnmatch
import logging
import uuid
from collections import OrderedDict, deque
from typing import Any

import anyio
import msgspec

from loopwarden.mcpgate import frames
from loopwarden.mcpgate.gate import ToolGate
from loopwarden.mcpgate.relay import Relay
from loopwarden.mcpgate.server import server_of

log = logging.getLogger(__name__)

SESSION_HEADER = b"mcp-session-id"
VERSION_HEADER = b"mcp-protocol-version"
MAX_QUEUED = 1000  # server frames kept for a session's GET stream (the oldest dropped beyond)
LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]")
LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")


class Session:
    """One host session: its server connection, its relay, the POSTs waiting for their answers."""

    def __init__(self, front: HttpFront, session_id: str) -> None:
        self.front = front
        self.id = session_id
        self.relay: Relay | None = None
        self.waiting: dict[bytes, anyio.Event] = {}
        self.answers: dict[bytes, bytes] = {}
        self.queue: deque[bytes] = deque(maxlen=MAX_QUEUED)
        self.queued = anyio.Event()
        self.streaming = False  # a GET stream is open
        self.closed = anyio.Event()

    async def serve(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """The session's life: its server connection open until the host ends it or the server exits."""
        gate = self.front.gate
        limit = gate.settings.max_frame_bytes
        try:
            async with server_of(self.front.command, self.front.url, limit) as server:
                self.relay = Relay(gate, self.to_host, server.send, session=f"mcp-{self.id[:16]}")
                task_status.started()
                async with anyio.create_task_group() as tg:

                    async def server_side() -> None:
                        async for frame in server.frames():
                            if isinstance(frame, bytearray):  # a piece of an over-long frame: for the stream
                                self._queue(bytes(frame))
                            else:
                                await self.relay.from_server(frame)
                        self.closed.set()

                    tg.start_soon(server_side)
                    await self.closed.wait()
                    tg.cancel_scope.cancel()
        except Exception:  # noqa: BLE001 - one session's trouble never ends the proxy
            log.exception("MCP session %s ended with an error", self.id[:16])
        finally:
            self.closed.set()
            for event in self.waiting.values():
                event.set()
            self.front.sessions.pop(self.id, None)
            if self.relay is not None:
                self.relay.close()
                await gate.end(gate.ref(self.relay.client_name, self.relay.session))

    async def to_host(self, frame: bytes) -> None:
        """A frame for the host: the answer of a waiting POST, else one for the GET stream."""
        head = frames.peek(frame) if self.waiting else None
        if head is not None and head.method is None and head.id and bytes(head.id) in self.waiting:
            key = bytes(head.id)
            self.answers[key] = frame
            self.waiting.pop(key).set()
            return
        self._queue(frame)

    def _queue(self, frame: bytes) -> None:
        """Kept for the GET stream (also before the host opens it), the oldest dropped beyond the bound."""
        if len(self.queue) == self.queue.maxlen:
            self.front.dropped += 1
        self.queue.append(frame)
        self.queued.set()


class HttpFront:
    """The ASGI app: routes each request to its session."""

    def __init__(self, command: list[str] | None, url: str | None, gate: ToolGate, host: str, path: str, tg: Any):
        self.command, self.url, self.gate, self.path, self.tg = command, url, gate, path.rstrip("/") or "/", tg
        self.sessions: OrderedDict[str, Session] = OrderedDict()  # least recently used first
        self.loopback = host in ("127.0.0.1", "localhost", "::1")
        self.dropped = 0  # server frames no POST waited for and no GET stream took

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if (scope["path"].rstrip("/") or "/") != self.path:
            return await respond(send, 404, b"not found")
        headers = {k.lower(): v for k, v in scope["headers"]}
        if self.loopback and not _loopback(headers):
            return await respond(send, 403, b"host or origin not allowed")
        method = scope["method"]
        session_id = headers.get(SESSION_HEADER, b"").decode("latin-1") or None
        session = self.sessions.get(session_id) if session_id else None
        if session_id and session is None:
            return await respond(send, 404, b"session not found")
        if session is not None:
            self.sessions.move_to_end(session.id)
        if method == "POST":
            return await self.post(session, headers, receive, send)
        if method == "GET" and session is not None:
            return await self.stream(session, receive, send)
        if method == "DELETE" and session is not None:
            session.closed.set()
            return await respond(send, 200, b"")
        return await respond(send, 405 if session is not None else 400, b"a session is needed (initialize)")

    async def post(self, session: Session | None, headers: dict, receive: Any, send: Any) -> None:
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        body = await read_body(receive, self.gate.settings.max_frame_bytes)
        if body is None:
            return await respond(send, 413, b"frame too large")
        version = headers.get(VERSION_HEADER, b"").decode("latin-1")
        if session is None and version and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            return await respond(send, 400, unsupported_revision(), b"application/json")
        head = frames.peek(body)
        if session is None:
            if head is None or head.method != "initialize":
                return await respond(send, 400, b"no session: start one with initialize")
            session = await self.open()
        assert session.relay is not None
        if head is None or head.method is None or not head.id:  # a notification, a response, a batch
            await session.relay.from_host(body)
            return await respond(send, 202, b"", session_id=session.id)
        key = bytes(head.id)
        done = session.waiting[key] = anyio.Event()
        await session.relay.from_host(body)
        await wait_or_disconnect(done, receive)
        answer = session.answers.pop(key, None)
        session.waiting.pop(key, None)
        if answer is None:
            return await respond(send, 503, b"the session ended before the server answered")
        await respond(send, 200, answer, b"application/json", session_id=session.id)

    async def stream(self, session: Session, receive: Any, send: Any) -> None:
        """The session's event stream: the server's frames no POST waits for, as SSE events."""
        if session.streaming:
            return await respond(send, 409, b"the session has an event stream already")
        session.streaming = True
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b": open\n\n", "more_body": True})
        try:
            async with anyio.create_task_group() as tg:

                async def until_gone() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                async def until_closed() -> None:
                    await session.closed.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(until_gone)
                tg.start_soon(until_closed)
                while True:
                    while session.queue:
                        frame = session.queue.popleft()
                        event = b"event: message\ndata: " + frame + b"\n\n"
                        await send({"type": "http.response.body", "body": event, "more_body": True})
                    await session.queued.wait()
                    session.queued = anyio.Event()
        finally:
            session.streaming = False
            with anyio.CancelScope(shield=True):
                try:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except Exception:  # noqa: BLE001 - the host is gone
                    pass

    async def open(self) -> Session:
        while len(self.sessions) >= self.gate.settings.max_sessions:
            # hosts that went away without ending their session must not lock new ones out: the least
            # recently used session ends (its host gets 404 and starts a new one, as the spec says)
            _old_id, old = self.sessions.popitem(last=False)
            old.closed.set()
        session = Session(self, uuid.uuid4().hex)
        self.sessions[session.id] = session
        await self.tg.start(session.serve)
        return session


def _loopback(headers: dict) -> bool:
    host = headers.get(b"host", b"").decode("latin-1")
    origin = headers.get(b"origin", b"").decode("latin-1")
    if not any(fnmatch.fnmatchcase(host, pattern) for pattern in LOOPBACK_HOSTS):
        return False
    return not origin or any(fnmatch.fnmatchcase(origin, pattern) for pattern in LOOPBACK_ORIGINS)


async def read_body(receive: Any, limit: int) -> bytes | None:
    """The request's body, None beyond ``limit`` bytes (never held beyond it)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return bytes(body)
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body"):
            return bytes(body)


async def wait_or_disconnect(done: anyio.Event, receive: Any) -> None:
    """Until the answer is there or the host hung up."""
    async with anyio.create_task_group() as tg:

        async def until_gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            tg.cancel_scope.cancel()

        tg.start_soon(until_gone)
        await done.wait()
        tg.cancel_scope.cancel()


async def respond(
    send: Any, status: int, body: bytes, content_type: bytes = b"text/plain", session_id: str | None = None
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if session_id:
        headers.append((SESSION_HEADER, session_id.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def unsupported_revision() -> bytes:
    """The answer to a 2026-07-28 request over HTTP: the revisions served (all with a session)."""
    from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    error = {
        "code": UNSUPPORTED_PROTOCOL_VERSION,
        "message": "this proxy serves HTTP hosts with a session (the initialize handshake)",
        "data": {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS)},
    }
    return msgspec.json.encode({"jsonrpc": "2.0", "id": None, "error": error})
