"""The HTTP side of the service: aiohttp routes under ``/v1/``, the token, the body bound, the listeners.

Why aiohttp: it is asyncio-native, so the HTTP handlers, the runner client's
aiokafka producer and listener share one event loop and a check never crosses
threads; its HTTP parser is C (llhttp), it keeps connections alive, and it
serves TCP and Unix sockets from one application. It is already what the
worker's HTTP pages run on.

Every failure is a JSON ``{"error": ...}`` that never repeats the body: a
body over ``max_body`` is 413 (refused on its ``Content-Length`` before it is
read, or when reading passes the bound), a body that is not JSON or not the
endpoint's shape is 400, an unknown path 404, a wrong method 405, a missing
or wrong token 401 (compared in constant time).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import re
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from loopwarden.schemas import sidecar as api
from loopwarden.sidecar.hooks_endpoint import claude_code_hook
from loopwarden.sidecar.service import Service

log = logging.getLogger(__name__)
JSON = "application/json"
_encoder = msgspec.json.Encoder()
_AT = re.compile(r" - at `(\$[A-Za-z0-9_.\[\]]*)`$")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _local_host(request: web.Request) -> bool:
    """Whether the request names this machine in its Host header (or came over the Unix socket).

    A web page the developer opens can make the browser send requests to 127.0.0.1, and DNS
    rebinding can make such a page read the answers: browsers send an ``Origin`` header and the
    page's own host name, so both are refused (the token, when given, stops them too)."""
    sock = request.transport.get_extra_info("socket") if request.transport is not None else None
    if sock is not None and sock.family == socket.AF_UNIX:
        return True
    host = request.host
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host
    else:
        host = host.rsplit(":", 1)[0]
    return is_loopback(host)


def read_token(path: str | os.PathLike) -> bytes:
    """The bearer token in ``path`` (surrounding whitespace dropped); an empty file is an error."""
    token = Path(path).read_bytes().strip()
    if not token:
        raise ValueError(f"token file {path} is empty")
    return token


def _json(status: int, body: msgspec.Struct) -> web.Response:
    return web.Response(status=status, body=_encoder.encode(body), content_type=JSON)


def _error(status: int, text: str) -> web.Response:
    return _json(status, api.Error(error=text))


def validation_text(exc: msgspec.ValidationError) -> str:
    """What was wrong with a body, from the Struct's side only: a missing field's name (ours) or the
    path of the bad value, never the value (an enum error would quote it)."""
    text = str(exc)
    if text.startswith("Object missing required field"):
        return text
    at = _AT.search(text)
    return f"invalid value at {at.group(1)}" if at else "invalid request body"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _post(
    service: Service, decoder: msgspec.json.Decoder, method: Callable[[Any], Awaitable[msgspec.Struct]]
) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        try:
            req = decoder.decode(body)
        except msgspec.ValidationError as exc:
            service.stats.bad_requests += 1
            return _error(400, validation_text(exc))
        except msgspec.DecodeError:
            service.stats.bad_requests += 1
            return _error(400, "body is not valid JSON")
        return _json(200, await method(req))

    return handle


def make_app(service: Service, token: bytes | None = None) -> web.Application:
    """The ``/v1/`` application over ``service``; with ``token``, every request needs ``Bearer <token>``."""
    limit = service.limits.max_body
    expected = b"Bearer " + token if token is not None else None
    stats = service.stats

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        stats.requests += 1
        if "Origin" in request.headers or (expected is None and not _local_host(request)):
            stats.forbidden += 1
            return _error(403, "browser or non-loopback Host requests are refused")
        if expected is not None:
            given = request.headers.get("Authorization", "").encode("utf-8", "replace")
            if not hmac.compare_digest(given, expected):
                stats.unauthorized += 1
                return _error(401, "missing or wrong bearer token")
        length = request.content_length
        if length is not None and length > limit:
            stats.too_large += 1
            return _error(413, f"body over {limit} bytes")
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            stats.too_large += 1
            return _error(413, f"body over {limit} bytes")
        except web.HTTPNotFound:
            stats.not_found += 1
            return _error(404, "no such endpoint (see /v1/health)")
        except web.HTTPMethodNotAllowed as exc:
            return _error(405, f"method not allowed; use {', '.join(sorted(exc.allowed_methods))}")
        except web.HTTPException as exc:
            return _error(exc.status, exc.reason)
        except Exception:  # noqa: BLE001 - a bug answers 500 (callers fail open), the service goes on
            stats.internal_errors += 1
            log.exception("sidecar request failed")
            return _error(500, "internal error")

    app = web.Application(client_max_size=limit, middlewares=[guard])
    posts = {
        "/v1/check": (api.CheckRequest, service.check),
        "/v1/result": (api.ResultRequest, service.result),
        "/v1/ack": (api.AckRequest, service.ack),
        "/v1/compaction": (api.CompactionRequest, service.compaction),
        "/v1/run_start": (api.RunStartRequest, service.run_start),
        "/v1/run_end": (api.RunEndRequest, service.run_end),
    }
    for path, (type_, method) in posts.items():
        app.router.add_post(path, _post(service, msgspec.json.Decoder(type_), method))
    app.router.add_post("/v1/hooks/claude-code", claude_code_hook(service.stats, posts))

    async def health(_request: web.Request) -> web.StreamResponse:
        return _json(200, service.health())

    async def stats_page(_request: web.Request) -> web.StreamResponse:
        return _json(200, service.stats_body())

    app.router.add_get("/v1/health", health)
    app.router.add_get("/v1/stats", stats_page)
    return app


async def start_listeners(
    app: web.Application, host: str | None, port: int, socket_path: str | None
) -> tuple[web.AppRunner, list[str]]:
    """Serve ``app`` on ``host:port`` (when ``host``) and on the Unix socket ``socket_path`` (mode 0600).

    Returns the runner (``cleanup()`` stops it) and the URLs it listens on."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    urls = []
    try:
        if host is not None:
            site = web.TCPSite(runner, host, port)
            await site.start()
            for address in runner.addresses:
                if isinstance(address, tuple):
                    h = f"[{address[0]}]" if ":" in address[0] else address[0]
                    urls.append(f"http://{h}:{address[1]}")
        if socket_path is not None:
            _clear_stale_socket(socket_path)
            old = os.umask(0o177)  # the socket is born 0600: no window in which others may connect
            try:
                await web.UnixSite(runner, socket_path).start()
            finally:
                os.umask(old)
            os.chmod(socket_path, 0o600)
            urls.append(f"unix:{socket_path}")
    except BaseException:
        await runner.cleanup()
        raise
    return runner, urls


def _clear_stale_socket(path: str) -> None:
    """Remove a socket left by an earlier run; anything else at ``path`` is an error, never removed."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(f"{path} exists and is not a socket")
    os.unlink(path)
