"""The decision service's HTTP/1.1 server: the protocol parses, an asyncio protocol carries, every bound explicit.

Why not aiohttp (which the worker's pages run on): the service's budget is
about a millisecond per check, and a request through an aiohttp application
(request object, middleware, router, response object) cost about 0.3 ms of
it, measured with ``loopwarden bench sidecar``. The service needs little of
HTTP: JSON bodies, keep-alive, a fixed set of paths. So the parsing is
httptools (the llhttp C parser, as uvicorn uses it), kept with the bounds of
a request in :mod:`loopwarden.sidecar.h1` (a state machine without I/O, as
h11 keeps it), and the rest is this module: the transport glue of a
connection (:class:`_Connection`: slots, flow control, order of answers,
timeouts) and one small cycle per request (:class:`_Cycle`, as uvicorn's
request-response cycle: the handler run to its ``(status, JSON body)``).

Bounds, each answered and counted (``ServiceStats``) rather than buffered:

- a request head (request line and headers) over ``max_head`` bytes or
  ``max_headers`` fields (every field counts, a repeated name too): 431,
  connection closed;
- a body over ``max_body``: 413, refused on its ``Content-Length`` before it
  is read, or as soon as a chunked body passes the bound;
- pipelined requests: at most ``max_pipelined`` wait per connection (reading
  pauses beyond it), and none is served while the client does not read its
  answers (the transport's write buffer paused);
- connections: at most ``max_connections``, at most ``max_per_peer`` of one
  peer (a uid on the Unix socket, an address on TCP), and at most
  ``max_unauthenticated`` not yet authenticated (:meth:`HTTPServer.authenticated`).
  A connection over a bound takes the slot of the oldest one that holds no
  request under way (not yet authenticated ones first, then the peer's own,
  then any): a slot cannot be held by sitting on it, so idle sockets never
  lock clients out; only when every slot is answering is the newcomer 503.
  A connection not authenticated within ``auth_timeout`` seconds of its
  start is closed (408), one idle for ``idle_timeout`` seconds, or
  mid-request for ``request_timeout``, by a sweep once a second;
- on the Unix socket, a peer whose uid (``SO_PEERCRED``) is not the
  service's, root's or one allowed (``allow_uids``) is answered 403 and
  closed before it sends a byte;
- anything llhttp cannot parse (or an Upgrade): 400, connection closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from loopwarden.hooks.service import check_socket_dir, peer_uid
from loopwarden.sidecar.h1 import Request, RequestReader, error_body, response_bytes

__all__ = ["HTTPServer", "Handler", "Request", "ServerCounts", "ServerLimits", "prepare_socket_dir", "response_bytes"]

log = logging.getLogger(__name__)


LINGER = 1.0  # seconds a refused connection's late bytes are read and dropped before it closes


class ServerLimits(msgspec.Struct, kw_only=True, frozen=True):
    """What one client may hold of the server."""

    max_body: int = 1 << 20  # bytes of one request body
    max_head: int = 16 << 10  # bytes of the request line and headers
    max_headers: int = 64
    max_pipelined: int = 16  # requests read ahead on one connection
    max_connections: int = 1024
    max_per_peer: int = 256  # connections of one uid (Unix socket) or one address (TCP)
    max_unauthenticated: int = 64  # connections whose first request has not passed the guard yet
    auth_timeout: float = 3.0  # seconds a new connection has to be authenticated
    idle_timeout: float = 60.0  # seconds a kept-alive connection may wait for its next request
    request_timeout: float = 10.0  # seconds from a request's first byte to its last


class ServerCounts(msgspec.Struct, kw_only=True):
    """What the server refused or closed (the service adds them to its stats)."""

    bad_requests: int = 0  # unparseable: 400
    too_large: int = 0  # 413 / 431
    connections_refused: int = 0  # 503: over a connection bound with every slot answering
    connections_evicted: int = 0  # closed to free a slot for a newcomer (idle, or not yet authenticated)
    peers_refused: int = 0  # 403 at connect: a Unix socket peer of another uid
    timeouts: int = 0  # closed by the sweep: idle or slow


Handler = Callable[[Request], Awaitable[tuple[int, bytes]]]


def _internal_error() -> tuple[int, bytes]:
    log.exception("sidecar request failed")
    return 500, error_body("internal error")


class _Cycle:
    """One request's handler, run to its answer: at once when it never waits, else in a task.

    A local decision never waits for anything, so the handler's coroutine usually finishes on its
    first step and the answer is written in the same callback that read the request. Scheduled as a
    task instead, it would wait in the loop's ready queue behind whatever the broker clients have
    ready, which is where most of a check's tail went (Python 3.11 has no eager tasks)."""

    __slots__ = ("conn", "coro", "keep_alive")

    def __init__(self, conn: _Connection, request: Request, keep_alive: bool) -> None:
        self.conn = conn
        self.keep_alive = keep_alive
        self.coro = conn.server.handler(request)

    def start(self) -> bool:
        """Run the handler to its first wait; True when it answered already."""
        try:
            waiting = self.coro.send(None)
        except StopIteration as done:
            self.conn.answer(done.value, self.keep_alive)
            return True
        except Exception:  # noqa: BLE001 - the handler answers its own errors; this is a bug's last stop
            self.conn.answer(_internal_error(), self.keep_alive)
            return True
        self.conn.server.loop.create_task(self._finish(waiting))
        return False

    async def _finish(self, waiting: Any) -> None:
        """Drive a handler that waited (``waiting``: the future it awaits, None to yield once) to its end."""
        coro = self.coro
        try:
            while True:
                if waiting is None:
                    await asyncio.sleep(0)
                else:
                    await asyncio.wait((waiting,))  # the handler reads the outcome itself when resumed
                try:
                    waiting = coro.send(None)
                except StopIteration as done:
                    answer = done.value
                    break
                except Exception:  # noqa: BLE001 - as in start
                    answer = _internal_error()
                    break
        except asyncio.CancelledError:
            coro.close()
            raise
        conn = self.conn
        conn.busy = False
        conn.answer(answer, self.keep_alive)
        conn.next()


class _Connection(asyncio.Protocol):
    """One client connection's transport: its slot, the requests its reader parsed, answered in order."""

    def __init__(self, server: HTTPServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        limits = server.limits
        self.reader = RequestReader(limits.max_head, limits.max_headers, limits.max_body, self._request)
        self.unix = False
        self.peer: object = None  # ("uid", n) on the Unix socket, ("ip", address) on TCP
        self.authenticated = False
        self.since = 0.0  # when it connected or last finished an answer: the oldest goes first
        self.born = 0.0  # when it connected (the deadline to authenticate runs from here)
        self.queue: deque[tuple[Request, bool]] = deque()
        self.busy = False
        self.write_paused = False
        self.read_paused = False
        self.closing = False
        self.eof = False  # the client half-closed: answer what it sent, then close
        self.last_active = 0.0

    # -- asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        server = self.server
        self.last_active = self.since = self.born = server.loop.time()
        sock = transport.get_extra_info("socket")
        self.unix = self.reader.unix = sock is not None and sock.family == socket.AF_UNIX
        if self.unix:
            uid = peer_uid(sock)
            if uid is not None and uid not in server.allow_uids:
                server.counts.peers_refused += 1
                self._fail(403, "this service serves only its own user")
                return
            self.peer = ("uid", uid)
            self.authenticated = True  # the peer's uid is the credential on the Unix socket
        else:
            peername = transport.get_extra_info("peername")
            self.peer = ("ip", peername[0] if peername else None)
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not server.admit(self):
            server.counts.connections_refused += 1
            self._fail(503, "too many connections")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.queue.clear()
        self.server.forget(self)

    def evictable(self) -> bool:
        """Holds no request under way: closing it loses nothing a client waits for."""
        return not (self.busy or self.queue or self.closing)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.last_active = now = self.server.loop.time()
        if not self.reader.feed(data, now) and not self.closing:
            refusal = self.reader.refusal
            assert refusal is not None
            counts = self.server.counts
            if refusal.too_large:
                counts.too_large += 1
            else:
                counts.bad_requests += 1
            self._fail(refusal.status, refusal.text)

    def eof_received(self) -> bool:
        """The client sent all it will (a half-close): keep the connection to answer what came, then
        close it. A request cut off by the end is never answered."""
        self.eof = True
        if self.busy or self.queue:
            return True
        self.closing = True
        return False  # nothing to answer: asyncio closes the transport

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self.next()

    # -- answering -------------------------------------------------------------------

    def _request(self, request: Request, keep_alive: bool) -> None:
        """The reader parsed a request: queue it (reading pauses at ``max_pipelined``), answer in order."""
        self.queue.append((request, keep_alive))
        if len(self.queue) >= self.server.limits.max_pipelined and not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()
        self.next()

    def next(self) -> None:
        """Answer the queued requests in order while none waits and the client reads its answers."""
        while not (self.busy or self.write_paused or self.closing or not self.queue):
            request, keep_alive = self.queue.popleft()
            if not _Cycle(self, request, keep_alive).start():
                self.busy = True
                return
        if self.eof and not self.busy and not self.queue and not self.closing:
            self._close()

    def answer(self, answer: tuple[int, bytes], keep_alive: bool) -> None:
        if self.closing:
            return
        status, body = answer
        if not self.authenticated and status not in (401, 403):  # the guard let it through
            self.server.authenticated(self)
        self.transport.write(response_bytes(status, body, close=not keep_alive))
        self.last_active = self.since = self.server.loop.time()
        if not keep_alive:
            self._close()
            return
        if self.read_paused and len(self.queue) < self.server.limits.max_pipelined:
            self.read_paused = False
            self.transport.resume_reading()

    def _fail(self, status: int, text: str) -> None:
        """Answer an error the reader found and close: what follows on the connection cannot be framed.

        The answer goes out with a half-close, and what the client still sends is read and dropped
        for a moment: closing outright with unread bytes would reset the connection, and the client
        would lose the answer that says why."""
        if self.closing:
            return
        transport = self.transport
        transport.write(response_bytes(status, error_body(text), close=True))
        self.closing = True
        self.queue.clear()
        if transport.can_write_eof():
            transport.write_eof()
            self.server.loop.call_later(LINGER, transport.close)
        else:
            transport.close()

    def _close(self) -> None:
        self.closing = True
        self.queue.clear()
        self.transport.close()

    def sweep(self, now: float) -> None:
        """Close the connection if it idled past ``idle_timeout``, took too long over a request, or was
        not authenticated in ``auth_timeout``."""
        limits = self.server.limits
        if self.busy or self.queue or self.closing:
            return
        if not self.authenticated and now - self.born > limits.auth_timeout:
            self.server.counts.timeouts += 1
            self._fail(408, "not authenticated in time")
        elif self.reader.started is not None:
            if now - self.reader.started > limits.request_timeout:
                self.server.counts.timeouts += 1
                self._fail(408, "request not received in time")
        elif now - self.last_active > limits.idle_timeout:
            self.server.counts.timeouts += 1
            self._close()


class HTTPServer:
    """``await HTTPServer(handler, limits).start(host, port, socket_path)``; ``await .close()``."""

    def __init__(
        self,
        handler: Handler,
        limits: ServerLimits | None = None,
        counts: Any = None,
        allow_uids: frozenset[int] = frozenset(),
    ) -> None:
        self.handler = handler
        self.limits = limits or ServerLimits()
        self.counts = counts if counts is not None else ServerCounts()  # any object with ServerCounts' fields
        self.allow_uids = frozenset({os.geteuid(), 0}) | allow_uids  # Unix socket peers served
        self.connections: set[_Connection] = set()
        self.unauthenticated: dict[_Connection, None] = {}  # oldest first
        self.per_peer: dict[object, int] = {}
        self.loop = asyncio.get_running_loop()
        self._servers: list[asyncio.Server] = []
        self._sweeper: asyncio.Task | None = None
        self._socket: tuple[str, int] | None = None  # the Unix socket's path and inode, removed at close

    def _protocol(self) -> _Connection:
        return _Connection(self)

    def admit(self, conn: _Connection) -> bool:
        """Give ``conn`` a slot, closing the oldest connection that holds none of a request under way
        where a bound is reached; False when every candidate is answering (the newcomer is refused)."""
        limits = self.limits
        if not conn.authenticated and len(self.unauthenticated) >= limits.max_unauthenticated:
            if not self._evict(self.unauthenticated):
                return False
        if self.per_peer.get(conn.peer, 0) >= limits.max_per_peer:
            if not self._evict([c for c in self.connections if c.peer == conn.peer]):
                return False
        if len(self.connections) >= limits.max_connections:
            if not (self._evict(self.unauthenticated) or self._evict(self.connections)):
                return False
        self.connections.add(conn)
        self.per_peer[conn.peer] = self.per_peer.get(conn.peer, 0) + 1
        if not conn.authenticated:
            self.unauthenticated[conn] = None
        return True

    def _evict(self, candidates: Any) -> bool:
        """Close the longest-waiting evictable connection of ``candidates``; whether there was one."""
        oldest = min((c for c in candidates if c.evictable()), key=lambda c: c.since, default=None)
        if oldest is None:
            return False
        self.counts.connections_evicted += 1
        # it holds no request: the answer and a plain close (no lingering: a flood of newcomers
        # must not turn into a pile of closing sockets)
        oldest.transport.write(response_bytes(503, error_body("connection closed for a newer one"), close=True))
        oldest._close()
        self.forget(oldest)
        return True

    def authenticated(self, conn: _Connection) -> None:
        """``conn``'s request passed the guard (the token, or no token needed): it leaves the small budget."""
        conn.authenticated = True
        self.unauthenticated.pop(conn, None)

    def forget(self, conn: _Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            n = self.per_peer.get(conn.peer, 0) - 1
            if n > 0:
                self.per_peer[conn.peer] = n
            else:
                self.per_peer.pop(conn.peer, None)
        self.unauthenticated.pop(conn, None)

    async def start(self, host: str | None, port: int, socket_path: str | None, private: bool = False) -> list[str]:
        """Listen on ``host:port`` (when ``host``) and on the Unix socket ``socket_path`` (mode 0600, its
        folder checked: :func:`prepare_socket_dir`); the URLs served."""
        urls = []
        try:
            if host is not None:
                server = await self.loop.create_server(self._protocol, host, port, reuse_address=True)
                self._servers.append(server)
                for sock in server.sockets:
                    address = sock.getsockname()
                    h = f"[{address[0]}]" if ":" in address[0] else address[0]
                    urls.append(f"http://{h}:{address[1]}")
            if socket_path is not None:
                prepare_socket_dir(socket_path, private)
                _clear_stale_socket(socket_path)
                old = os.umask(0o177)  # the socket is born 0600: no window in which others may connect
                try:
                    self._servers.append(await self.loop.create_unix_server(self._protocol, socket_path))
                finally:
                    os.umask(old)
                os.chmod(socket_path, 0o600)
                self._socket = (socket_path, os.lstat(socket_path).st_ino)
                urls.append(f"unix:{socket_path}")
        except BaseException:
            await self.close()
            raise
        self._sweeper = self.loop.create_task(self._sweep(), name="loopwarden-sidecar-sweep")
        return urls

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = self.loop.time()
            for conn in list(self.connections):
                conn.sweep(now)

    async def close(self, grace: float = 1.0) -> None:
        """Stop listening, let answers under way finish for up to ``grace`` seconds, close every connection."""
        for server in self._servers:
            server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        deadline = self.loop.time() + grace
        while any(c.busy for c in self.connections) and self.loop.time() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn._close()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        if self._socket is not None:  # ours still (same inode): clients then find no service, not a dead one
            path, inode = self._socket
            with contextlib.suppress(OSError):
                if os.lstat(path).st_ino == inode:
                    os.unlink(path)
            self._socket = None


def prepare_socket_dir(path: str, private: bool = False) -> None:
    """Make the socket's folder when missing (each missing level mode 0700), and refuse one that another
    user owns or that others may write (with ``private``, that others may enter): the clients check the
    same (``loopwarden.hooks.service``), so a socket there could not be told from an impostor's."""
    folder = os.path.dirname(os.path.abspath(path))
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for level in reversed(missing):
        os.mkdir(level, 0o700)
        os.chmod(level, 0o700)  # whatever the umask
    check_socket_dir(path)
    mode = os.lstat(os.path.dirname(os.path.abspath(path))).st_mode & 0o777
    if private and mode & 0o077:
        raise PermissionError(f"{os.path.dirname(path)} is mode {mode:o}: only its user may enter it (chmod 700)")


def _clear_stale_socket(path: str) -> None:
    """Remove a socket left by an earlier run; anything else at ``path``, or a socket a service still
    answers on, is an error, never removed."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nobody listens: left by a run that did not stop cleanly
    else:
        raise FileExistsError(f"a service already listens on {path}")
    finally:
        probe.close()
