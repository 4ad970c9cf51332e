"""A bounded, fail-open JSON client of the local decision service: one POST over a raw socket.

The service listens by default on a Unix socket in a folder only its user can enter
(:func:`default_socket`, ``~/.loopwarden/run/sidecar.sock``), and on TCP when told
(``http://127.0.0.1:PORT``). Before it sends anything (params, results, a token) the client
authenticates the listener (:func:`authenticate`): over the socket, its folder is owned by this
user (or root) and nobody else may write it, and the peer's uid (``SO_PEERCRED``) is this
user's or root's; over loopback TCP on Linux, the listening socket's owner in ``/proc/net/tcp``
is this user or root. A listener that fails is never sent a byte. Text for the model is taken
from an authenticated service only; from one that could not be authenticated (TCP beyond
loopback, or where the owner cannot be read) it is rebuilt from the verdict's fields
(:func:`field_text`), so an impostor cannot put words in the model's mouth.

Each hook run makes short-lived ``Connection: close`` requests; a timeout bounds the connect
and every read, so a service that is down or stuck costs the agent at most about ``timeout``
seconds per request, and the caller gets ``None`` with the reason in ``error``. It speaks just
the HTTP/1.1 the service answers (a status line, headers, a ``Content-Length`` or chunked body)
because ``http.client`` alone takes longer to import than a whole hook run may (its ``email``
parser): HOOKS.md, "Cost".
"""

from __future__ import annotations

import json
import os
import socket
import stat

URL_ENV = "LOOPWARDEN_SIDECAR_URL"
DEFAULT_TIMEOUT = 1.0  # seconds for the connect and for each read
MAX_ANSWER = 1 << 20  # bytes of an answer read at most
SOCKET_NAME = "sidecar.sock"
_STRUCT_UCRED = "3i"  # struct ucred: pid, uid, gid


def socket_dir() -> str:
    """The folder of the default socket: ``~/.loopwarden/run`` (the same for the service and every
    client of one user, whatever their environment: no port to agree on, no other user's service)."""
    return os.path.join(os.path.expanduser("~"), ".loopwarden", "run")


def default_socket() -> str:
    return os.path.join(socket_dir(), SOCKET_NAME)


def default_url() -> str:
    return "unix:" + default_socket()


def service_url(url: str | None = None) -> str:
    """The service's address: ``url``, else ``LOOPWARDEN_SIDECAR_URL``, else the default socket (every
    client's rule)."""
    return url or os.environ.get(URL_ENV) or default_url()


class Untrusted(OSError):
    """The listener is not this user's (or root's) service: nothing is sent to it."""


def trusted_uid(uid: int) -> bool:
    """Whether a peer's uid is this user's or root's."""
    return uid == os.geteuid() or uid == 0


def check_socket_dir(path: str) -> None:
    """Raise :class:`Untrusted` unless ``path``'s folder is a real folder owned by this user (or root)
    that no one else may write: only then is the socket in it the one this user's service made."""
    folder = os.path.dirname(path) or "."
    st = os.lstat(folder)  # OSError when missing: the service is not running
    if not stat.S_ISDIR(st.st_mode) or not trusted_uid(st.st_uid) or st.st_mode & 0o022:
        raise Untrusted(
            f"the socket's folder {folder} is not this user's alone (owner {st.st_uid}, mode {st.st_mode & 0o777:o})"
        )


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket (None where the OS does not say)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    import struct

    _pid, uid, _gid = struct.unpack(
        _STRUCT_UCRED, sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize(_STRUCT_UCRED))
    )
    return uid


def _hex_address(host: str, port: int, family: int) -> list[str]:
    """``/proc/net/tcp*``'s spelling of a local address (and of the wildcard address), as listed."""
    packed = socket.inet_pton(family, host)
    wildcard = bytes(len(packed))
    out = []
    for raw in (packed, wildcard):
        if family == socket.AF_INET:
            text = raw[::-1].hex().upper()
        else:  # four 32-bit words, each in host (little-endian) order
            text = "".join(raw[i : i + 4][::-1].hex().upper() for i in range(0, 16, 4))
        out.append(f"{text}:{port:04X}")
    return out


def tcp_listener_uid(host: str, port: int, family: int) -> int | None:
    """The uid owning the socket that listens on loopback ``host:port`` (Linux ``/proc/net/tcp``,
    ``/proc/net/tcp6``); None where that cannot be read."""
    wanted = set(_hex_address(host, port, family))
    if family == socket.AF_INET:  # an IPv4 listener may be a dual-stack IPv6 one: [::]:PORT
        wanted.add(f"{'0' * 32}:{port:04X}")
    found = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f, None)
                for line in f:
                    fields = line.split()
                    if len(fields) > 7 and fields[3] == "0A" and fields[1] in wanted:  # 0A: LISTEN
                        return int(fields[7])
            found = found if found is not None else -1
        except OSError:
            continue
    return -1 if found is not None else None


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


def authenticate(sock: socket.socket, unix: str | None) -> bool:
    """Check a connected socket's listener before anything is sent; raise :class:`Untrusted` when it is
    another user's. True: it is this user's (or root's) service; False: TCP whose owner cannot be read
    (beyond loopback, or no ``/proc``): usable, but its text is not shown to the model."""
    if unix is not None:
        check_socket_dir(unix)
        uid = peer_uid(sock)
        if uid is not None and not trusted_uid(uid):
            raise Untrusted(f"the service at {unix} runs as uid {uid}, not this user")
        return True
    family = sock.family
    host, port = sock.getpeername()[:2]  # the address connected to (a host name resolved)
    if not _loopback(host, family):
        return False
    uid = tcp_listener_uid(host, port, family)
    if uid is None:
        return False
    if uid < 0:
        raise Untrusted(f"no listener of {host}:{port} in /proc/net/tcp: not this user's service")
    if not trusted_uid(uid):
        raise Untrusted(f"{host}:{port} is not this user's service (listener uid {uid})")
    return True


def _loopback(host: str, family: int) -> bool:
    return host == "::1" if family == socket.AF_INET6 else family == socket.AF_INET and host.startswith("127.")


VERDICT_TEXT = {
    "warn": "Warning: this looks like a tool-call loop",
    "block": "Tool call blocked by loop detection",
    "abort": "CRITICAL: run aborted by loop detection",
}


def field_text(action: str, detector: object = None, count: object = None) -> str:
    """The model's text for a verdict from its fields alone: a fixed sentence, the detector when it is
    a plain name, the count when it is a plain int. Used when the service's own text cannot be trusted."""
    text = VERDICT_TEXT.get(action, VERDICT_TEXT["block"])
    parts = []
    if (
        isinstance(detector, str)
        and 0 < len(detector) <= 64
        and detector.replace("_", "").isalpha()
        and detector.isascii()
    ):
        parts.append(detector)
    if type(count) is int and 0 < count <= 1_000_000:
        parts.append(f"{count} calls")
    return f"{text} ({', '.join(parts)})." if parts else text + "."


def rebuild_text(path: str, answer: dict) -> dict:
    """``answer`` with every model-facing ``message`` replaced by :func:`field_text` of its verdict."""
    if path in ("/v1/check", "/v1/hooks/claude-code") and isinstance(answer.get("message"), str):
        answer["message"] = field_text(str(answer.get("action")), answer.get("detector"), answer.get("count"))
    for key, action in (("warning", "warn"), ("abort", "abort")):
        inner = answer.get(key)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            inner["message"] = field_text(action)
    return answer


class Service:
    """``post(path, body)`` -> the answer's JSON object, or None (``error`` says why)."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float | None = None) -> None:
        self.url = service_url(url)
        self.token = token
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        self.error: str | None = None

    def _connect(self, unix: str | None, host: str, port: int) -> tuple[socket.socket, bool]:
        """A connected socket whose listener passed :func:`authenticate`, and whether its text may be shown."""
        if unix is not None:
            check_socket_dir(unix)  # before the connect: a folder others may write holds no socket of ours
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            target: object = unix
        else:
            family = _address_family(host)
            if family is None:  # a host name: resolved (getaddrinfo imports the idna codec, ~2 ms)
                sock = socket.create_connection((host, port), timeout=self.timeout)
                target = None
            else:
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.settimeout(self.timeout)
                target = (host, port)
        try:
            if target is not None:
                sock.connect(target)
            trusted = authenticate(sock, unix)
            if unix is None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            sock.close()
            raise
        return sock, trusted

    def post(self, path: str, body: dict) -> dict | None:
        try:
            unix, host, port, prefix = parse_url(self.url)
            # a lone surrogate (not UTF-8) is sent as its escape text: distinct, deterministic, never a 400
            data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "backslashreplace")
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
            sock, trusted = self._connect(unix, host, port)
            with sock:
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
            return answer if trusted else rebuild_text(path, answer)
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
