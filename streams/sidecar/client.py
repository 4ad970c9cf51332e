"""A minimal synchronous client of the service: one keep-alive connection, TCP or Unix socket.

Standard library only (``http.client``), so a script or a hook can ask the
service without aiohttp or the runner client; the benchmark and the tests use
it too. Not thread-safe: one connection, one request at a time. Like the
hook's client, it sends nothing to a listener of another user.
"""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any
from urllib.parse import urlsplit

from loopwarden.hooks.service import authenticate, check_socket_dir, service_url


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        check_socket_dir(self._path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
            authenticate(sock, self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class _TCPConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        try:
            authenticate(self.sock, None)
        except OSError:
            self.sock.close()
            self.sock = None
            raise


class SidecarClient:
    """``SidecarClient("unix:/path/to.sock")`` or ``SidecarClient("http://127.0.0.1:PORT")``; no URL:
    ``LOOPWARDEN_SIDECAR_URL``, else the default socket. The listener is authenticated as the hook's
    client does it (``loopwarden.hooks.service.authenticate``) before a request is sent."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 5.0) -> None:
        url = service_url(url)
        self.url = url
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        if url.startswith("unix:"):
            self._conn: http.client.HTTPConnection = _UnixConnection(url[len("unix:") :], timeout)
        else:
            parts = urlsplit(url)
            self._conn = _TCPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout)

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """One request on the kept-alive connection (reconnecting once if the service closed it)."""
        for attempt in (0, 1):
            try:
                self._conn.request(method, path, body=body, headers=self._headers)
                response = self._conn.getresponse()
                return response.status, response.read()
            except (ConnectionError, http.client.BadStatusLine):
                self._conn.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def post(self, path: str, body: dict[str, Any] | bytes) -> dict[str, Any]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        status, raw = self.request("POST", path, data)
        out = json.loads(raw)
        if status != 200:
            raise SidecarError(status, out.get("error", ""))
        return out

    def get(self, path: str) -> dict[str, Any]:
        status, raw = self.request("GET", path)
        if status != 200:
            raise SidecarError(status, json.loads(raw).get("error", ""))
        return json.loads(raw)

    def check(self, agent_id: str, tool_name: str, params: Any = None, **ids: Any) -> dict[str, Any]:
        body = {"agent_id": agent_id, "tool_name": tool_name, **ids}
        if params is not None:
            body["params"] = params
        return self.post("/v1/check", body)

    def result(self, agent_id: str, **fields: Any) -> dict[str, Any]:
        return self.post("/v1/result", {"agent_id": agent_id, **fields})

    def health(self) -> dict[str, Any]:
        return self.get("/v1/health")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> SidecarClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SidecarError(Exception):
    def __init__(self, status: int, error: str) -> None:
        super().__init__(f"{status}: {error}")
        self.status = status
        self.error = error
