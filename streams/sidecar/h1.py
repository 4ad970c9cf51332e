"""The decision service's HTTP/1.1 protocol, without I/O: bytes in, requests or a refusal out.

As h11 keeps the protocol a state machine apart from any socket, :class:`RequestReader`
holds one connection's parsing state (httptools, the llhttp C parser, as
uvicorn uses it) and every bound of a request: it is fed the bytes a client
sent and hands each complete request, with whether the client keeps the
connection, to ``on_request`` as soon as it is parsed (before the rest of the
bytes: an answer may go out between two pipelined requests). A request past a
bound, or bytes llhttp cannot frame, end the reader with a :class:`Refusal`:
the status to answer, after which nothing on the connection can be framed.
What it does not know: the transport, the clock (``now`` is given), the
counters, the handler. :mod:`loopwarden.sidecar.http` carries the bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus

import httptools
import msgspec


class Request:
    """One parsed request: method and path as text, header names lower-case, the whole body."""

    __slots__ = ("method", "path", "headers", "body", "unix")

    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes, unix: bool) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.unix = unix  # over the Unix socket, from a peer whose uid was checked at connect


class Refusal(msgspec.Struct, frozen=True):
    """Why the reader stopped: the status and text to answer; ``too_large`` (413/431) or unparseable (400)."""

    status: int
    text: str
    too_large: bool


_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


def response_bytes(status: int, body: bytes, close: bool = False) -> bytes:
    """One JSON response, head and body; the body ends with a newline (curl's output stays apart)."""
    if not body.endswith(b"\n"):
        body += b"\n"
    reason = _REASONS.get(status, b"Unknown")
    connection = b"Connection: close\r\n" if close else b""
    return b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        status,
        reason,
        len(body),
        connection,
        body,
    )


def error_body(text: str) -> bytes:
    return msgspec.json.encode({"error": text})


class _Refused(Exception):
    """A bound was passed mid-parse: the reader's refusal is set; parsing stops."""


class RequestReader:
    """One connection's requests from its bytes, each bound checked (the limits in ``ServerLimits``)."""

    __slots__ = (
        "max_head",
        "max_headers",
        "max_body",
        "unix",
        "on_request",
        "refusal",
        "started",
        "_parser",
        "_now",
        "_url",
        "_headers",
        "_fields",
        "_head_bytes",
        "_in_head",
        "_fed",
        "_body",
        "_body_bytes",
    )

    def __init__(
        self, max_head: int, max_headers: int, max_body: int, on_request: Callable[[Request, bool], None]
    ) -> None:
        self.max_head = max_head
        self.max_headers = max_headers
        self.max_body = max_body
        self.unix = False  # the requests' transport is the Unix socket (set when the connection is made)
        self.on_request = on_request
        self.refusal: Refusal | None = None
        self.started: float | None = None  # when the request being read began (``now`` of its first bytes)
        self._parser = httptools.HttpRequestParser(self)
        self._now = 0.0
        self._url = b""
        self._headers: dict[str, str] = {}
        self._fields = 0  # header fields of this head, repeated names included
        self._head_bytes = 0  # of the request line and headers seen so far
        self._in_head = False
        self._fed = 0  # bytes fed while a head was incomplete (httptools holds a split header's pieces)
        self._body: list[bytes] = []
        self._body_bytes = 0

    def feed(self, data: bytes, now: float) -> bool:
        """Parse ``data``; False once refused (:attr:`refusal`): answer it and close."""
        if self.refusal is not None:
            return False
        self._now = now
        if self._in_head:  # httptools joins a split header's pieces itself: bound what it may hold
            self._fed += len(data)
            if self._fed > self.max_head:
                self.refusal = Refusal(431, "request head too large", True)
                return False
        try:
            self._parser.feed_data(data)
        except _Refused:
            return False
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _Refused):
                return False
            raise
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            if self.refusal is None:
                self.refusal = Refusal(400, "malformed HTTP request", False)
            return False
        return self.refusal is None

    def _refuse(self, status: int, text: str, too_large: bool = True) -> _Refused:
        self.refusal = Refusal(status, text, too_large)
        return _Refused()

    # -- httptools callbacks -------------------------------------------------------

    def on_message_begin(self) -> None:
        self.started = self._now
        self._url = b""
        self._headers = {}
        self._fields = 0
        self._head_bytes = 0
        self._in_head = True
        self._fed = 0
        self._body = []
        self._body_bytes = 0

    def _head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > self.max_head:
            raise self._refuse(431, "request head too large")

    def on_url(self, url: bytes) -> None:
        self._head(len(url))
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head(len(name) + len(value) + 4)
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")
        self._fields += 1
        if self._fields > self.max_headers:
            raise self._refuse(431, "too many header fields")

    def on_headers_complete(self) -> None:
        self._in_head = False  # the body has its own bound
        if self._parser.should_upgrade():  # nothing here speaks another protocol on this connection
            raise self._refuse(400, "upgrade not supported", too_large=False)
        length = self._headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            raise self._refuse(413, f"body over {self.max_body} bytes")

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > self.max_body:
            raise self._refuse(413, f"body over {self.max_body} bytes")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.started = None
        parser = self._parser
        url = self._url
        query = url.find(b"?")
        path = (url if query < 0 else url[:query]).decode("latin-1")
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        request = Request(parser.get_method().decode("latin-1"), path, self._headers, body, self.unix)
        self.on_request(request, parser.should_keep_alive())
