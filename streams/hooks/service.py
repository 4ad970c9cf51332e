"""A bounded, fail-open JSON client of the local decision service: one POST over a raw socket.

The service listens on loopback TCP (``http://127.0.0.1:7766``) or a Unix socket
(``unix:/path/to.sock``). Each hook run makes short-lived ``Connection: close`` requests;
a timeout bounds the connect and every read, so a service that is down or stuck costs the
agent at most about ``timeout`` seconds per request, and the caller gets ``None`` with the
reason in ``error``. It speaks just the HTTP/1.1 the service answers (a status line,
headers, a ``Content-Length`` or chunked body) because ``http.client`` alone takes longer
to import than a whole hook run may (its ``email`` parser): HOOKS.md, "Cost".
"""

from __future__ import annotations

import json
import os
import socket

DEFAULT_URL = "http://127.0.0.1:7766"
URL_ENV = "LOOPWARDEN_SIDECAR_URL"
DEFAULT_TIMEOUT = 1.0  # seconds for the connect and for each read
MAX_ANSWER = 1 << 20  # bytes of an answer read at most


def service_url(url: str | None = None) -> str:
    """The service's address: ``url``, else ``LOOPWARDEN_SIDECAR_URL``, else the default (every client's rule)."""
    return url or os.environ.get(URL_ENV) or DEFAULT_URL


def read_token(path: str | None) -> str | None:
    """The bearer token from a token file (first line), or None without one."""
    if not path:
        return None
    with open(path, encoding="utf-8") as f:
        return f.readline(4096).strip() or None


def parse_url(url: str) -> tuple[str | None, str, int, str]:
    """``(unix_path, host, port, path_prefix)`` of ``http://HOST[:PORT][/PREFIX]`` or ``unix:/PATH``."""
    if url.startswith("unix:"):
        return url[len("unix:") :], "localhost", 0, ""
    if not url.startswith("http://"):
        raise ValueError(f"the service URL must be http://HOST:PORT or unix:/PATH, not {url!r}")
    netloc, slash, prefix = url[len("http://") :].partition("/")
    if netloc.startswith("["):  # [::1]:7766
        host, _, rest = netloc[1:].partition("]")
        port = rest[1:]
    else:
        host, _, port = netloc.partition(":")
    return None, host or "127.0.0.1", int(port or 80), (slash + prefix).rstrip("/")


def _address_family(host: str) -> int | None:
    """AF_INET or AF_INET6 for an IP address literal, None for a host name."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        return family
    return None


def _dechunk(body: bytes) -> bytes:
    out, pos = [], 0
    while True:
        end = body.index(b"\r\n", pos)
        size = int(body[pos:end].split(b";", 1)[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(body[end + 2 : end + 2 + size])
        pos = end + 2 + size + 2


class Service:
    """``post(path, body)`` -> the answer's JSON object, or None (``error`` says why)."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float | None = None) -> None:
        self.url = service_url(url)
        self.token = token
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        self.error: str | None = None

    def _connect(self, unix: str | None, host: str, port: int) -> socket.socket:
        if unix is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(unix)
            except OSError:
                sock.close()
                raise
            return sock
        family = _address_family(host)
        if family is None:  # a host name: resolved (getaddrinfo imports the idna codec, ~2 ms)
            sock = socket.create_connection((host, port), timeout=self.timeout)
        else:
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect((host, port))
            except OSError:
                sock.close()
                raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def post(self, path: str, body: dict) -> dict | None:
        try:
            unix, host, port, prefix = parse_url(self.url)
            data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
            head = [
                f"POST {prefix}{path} HTTP/1.1",
                f"Host: {host}:{port}" if unix is None else "Host: localhost",
                "Content-Type: application/json",
                f"Content-Length: {len(data)}",
                "Connection: close",
            ]
            if self.token:
                head.append(f"Authorization: Bearer {self.token}")
            request = ("\r\n".join(head) + "\r\n\r\n").encode() + data
            with self._connect(unix, host, port) as sock:
                sock.sendall(request)
                chunks, size = [], 0
                while size <= MAX_ANSWER:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                    raw = b"".join(chunks) if len(chunks) > 1 else chunk
                    if _complete(raw):
                        break
            raw = b"".join(chunks)
            header, sep, payload = raw.partition(b"\r\n\r\n")
            if not sep:
                raise ValueError("no complete HTTP answer")
            lines = header.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            if "chunked" in fields.get("transfer-encoding", "").lower():
                payload = _dechunk(payload)
            elif "content-length" in fields:
                payload = payload[: int(fields["content-length"])]
            if status != 200:
                self.error = f"{path}: HTTP {status}"
                return None
            answer = json.loads(payload)
            if not isinstance(answer, dict):
                self.error = f"{path}: the answer is not a JSON object"
                return None
            return answer
        except (OSError, ValueError, IndexError) as exc:
            self.error = f"{path}: {type(exc).__name__}: {exc}"
            return None


def _complete(raw: bytes) -> bool:
    """True once a whole answer with a Content-Length (or a chunked end) is in ``raw``."""
    header, sep, payload = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    lower = header.lower()
    at = lower.find(b"content-length:")
    if at >= 0:
        end = lower.find(b"\r\n", at)
        return len(payload) >= int(lower[at + 15 : end if end >= 0 else None])
    if b"chunked" in lower:
        return payload.endswith(b"0\r\n\r\n")
    return False
