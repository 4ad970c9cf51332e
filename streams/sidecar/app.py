"""The service's endpoints under ``/v1/``: the guard (browsers, foreign Host names, the token), routing,
and the JSON bodies, over :mod:`loopwarden.sidecar.http`.

Every failure is a JSON ``{"error": ...}`` that never repeats the body: a
body over ``max_body`` is 413 (refused on its ``Content-Length`` before it is
read, or when reading passes the bound), a body that is not JSON or not the
endpoint's shape is 400, an unknown path 404, a wrong method 405, a missing
or wrong token 401 (compared in constant time), a bug 500 (callers fail open).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from loopwarden.schemas import sidecar as api
from loopwarden.schemas.bounds import MAX_DEPTH, too_deep
from loopwarden.sidecar.hooks_endpoint import claude_code_hook
from loopwarden.sidecar.http import Handler, HTTPServer, Request, ServerLimits
from loopwarden.sidecar.service import Service

log = logging.getLogger(__name__)
_encoder = msgspec.json.Encoder()
_AT = re.compile(r" - at `(\$[A-Za-z0-9_.\[\]]*)`$")
Answer = tuple[int, bytes]


_LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host in _LOCAL_NAMES:  # what nearly every request says: no address parsing
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _local_host(request: Request) -> bool:
    """Whether the request names this machine in its Host header (or came over the Unix socket).

    A web page the developer opens can make the browser send requests to 127.0.0.1, and DNS
    rebinding can make such a page read the answers: browsers send an ``Origin`` header and the
    page's own host name, so both are refused (the token, when given, stops them too). A request
    without a Host header is no browser's."""
    if request.unix:
        return True
    host = request.headers.get("host")
    if host is None:
        return True
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


def _json(body: msgspec.Struct, status: int = 200) -> Answer:
    return status, _encoder.encode(body)


def _error(status: int, text: str) -> Answer:
    return _json(api.Error(error=text), status)


def validation_text(exc: msgspec.ValidationError) -> str:
    """What was wrong with a body, from the Struct's side only: a missing field's name (ours) or the
    path of the bad value, never the value (an enum error would quote it)."""
    text = str(exc)
    if text.startswith("Object missing required field"):
        return text
    at = _AT.search(text)
    return f"invalid value at {at.group(1)}" if at else "invalid request body"


Endpoint = Callable[[Request], Awaitable[Answer]]


def _post(
    service: Service, decoder: msgspec.json.Decoder, method: Callable[[Any], Awaitable[msgspec.Struct]]
) -> Endpoint:
    async def handle(request: Request) -> Answer:
        try:
            request.body.decode()  # msgspec takes free-form values (params, result) as Raw, unchecked
            req = decoder.decode(request.body)
        except UnicodeDecodeError:
            service.stats.bad_requests += 1
            return _error(400, "body is not valid UTF-8")
        except msgspec.ValidationError as exc:
            service.stats.bad_requests += 1
            return _error(400, validation_text(exc))
        except msgspec.DecodeError:
            service.stats.bad_requests += 1
            return _error(400, "body is not valid JSON")
        return _json(await method(req))

    return handle


def _done(method: Callable[[Any], Awaitable[msgspec.Struct]]) -> Callable[[Any], Awaitable[msgspec.Struct]]:
    async def done(req: Any) -> api.Done:
        await method(req)
        return api.Done()

    return done


def make_app(service: Service, token: bytes | None = None) -> Handler:
    """The ``/v1/`` handler over ``service``; with ``token``, every request needs ``Bearer <token>``."""
    expected = b"Bearer " + token if token is not None else None
    stats = service.stats
    posts = {
        "/v1/check": (api.CheckRequest, service.check),
        "/v1/check_batch": (api.CheckBatchRequest, service.check_batch),
        "/v1/result": (api.ResultRequest, service.result),
        "/v1/ack": (api.AckRequest, service.ack),
        "/v1/compaction": (api.CompactionRequest, service.compaction),
        "/v1/run_start": (api.RunStartRequest, service.run_start),
        "/v1/run_end": (api.RunEndRequest, service.run_end),
    }
    for path in ("/v1/ack", "/v1/compaction", "/v1/run_end"):  # answered {"ok": true}, as SIDECAR.md shows
        type_, method = posts[path]
        posts[path] = (type_, _done(method))
    routes: dict[str, dict[str, Endpoint]] = {
        path: {"POST": _post(service, msgspec.json.Decoder(type_), method)} for path, (type_, method) in posts.items()
    }
    routes["/v1/hooks/claude-code"] = {"POST": claude_code_hook(stats, posts)}

    async def health(_request: Request) -> Answer:
        return _json(service.health())

    async def stats_page(_request: Request) -> Answer:
        return _json(service.stats_body())

    routes["/v1/health"] = {"GET": health}
    routes["/v1/stats"] = {"GET": stats_page}

    async def handle(request: Request) -> Answer:
        stats.requests += 1
        headers = request.headers
        if "origin" in headers or (expected is None and not _local_host(request)):
            stats.forbidden += 1
            return _error(403, "browser or non-loopback Host requests are refused")
        if expected is not None:
            given = headers.get("authorization", "").encode("utf-8", "replace")
            if not hmac.compare_digest(given, expected):
                stats.unauthorized += 1
                return _error(401, "missing or wrong bearer token")
        methods = routes.get(request.path)
        if methods is None:
            stats.not_found += 1
            return _error(404, "no such endpoint (see /v1/health)")
        endpoint = methods.get(request.method)
        if endpoint is None:
            return _error(405, f"method not allowed; use {', '.join(sorted(methods))}")
        if request.body and too_deep(request.body) is not None:  # msgspec would recurse past Python's limit
            stats.bad_requests += 1
            return _error(400, f"body nested deeper than {MAX_DEPTH}")
        try:
            return await endpoint(request)
        except Exception:  # noqa: BLE001 - a bug answers 500 (callers fail open), the service goes on
            stats.internal_errors += 1
            log.exception("sidecar request failed")
            return _error(500, "internal error")

    return handle


async def start_listeners(
    service: Service,
    handler: Handler,
    host: str | None,
    port: int,
    socket_path: str | None,
    allow_uids: frozenset[int] = frozenset(),
    private: bool = False,
) -> tuple[HTTPServer, list[str]]:
    """Serve ``handler`` on ``host:port`` (when ``host``) and on the Unix socket ``socket_path``
    (mode 0600, in a folder only this user may write, with ``private`` enter; peers of another uid
    than this one, root and ``allow_uids`` refused), with ``service``'s body bound and counters.
    Returns the server (``close()`` stops it) and the URLs it listens on."""
    server = HTTPServer(
        handler, ServerLimits(max_body=service.limits.max_body), counts=service.stats, allow_uids=allow_uids
    )
    urls = await server.start(host, port, socket_path, private)
    return server, urls
