"""``POST /v1/hooks/claude-code``: Claude Code's ``http`` hook, answered by the service itself.

Claude Code can post its hook JSON straight to a URL and read the answer as a command
hook's output. The exchange is the one ``loopwarden hook claude-code`` makes
(:mod:`loopwarden.hooks.exchange`), driven here in-process over the same endpoint
methods, so there is no hook process per tool call at all. The agent id is the
``X-Loopwarden-Agent-Id`` header (``loopwarden hook install claude-code --http --agent-id``),
else ``claude-code``. Like the command it fails open: a body it cannot read is answered
``{}`` (the host goes on), counted as a bad request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from loopwarden.hooks.exchange import exchange
from loopwarden.hooks.hosts import HOSTS
from loopwarden.sidecar.http import Request

Endpoint = tuple[type, Callable[[Any], Awaitable[msgspec.Struct]]]
HOST = HOSTS["claude-code"]
MAX_AGENT_ID = 256


async def _ask(posts: dict[str, Endpoint], path: str, body: dict) -> dict | None:
    type_, method = posts[path]
    try:
        req = msgspec.json.decode(msgspec.json.encode(body), type=type_)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    return msgspec.to_builtins(await method(req))


def claude_code_hook(stats: Any, posts: dict[str, Endpoint]) -> Callable[[Request], Awaitable[tuple[int, bytes]]]:
    """The handler; ``posts`` maps each ``/v1/`` path to its request type and service method."""

    async def handle(request: Request) -> tuple[int, bytes]:
        try:
            data = msgspec.json.decode(request.body)
        except msgspec.DecodeError:
            data = None
        if not isinstance(data, dict):
            stats.bad_requests += 1
            return 200, b"{}"
        agent_id = request.headers.get("x-loopwarden-agent-id", "")[:MAX_AGENT_ID] or HOST.name
        ex = exchange(HOST, agent_id, data)
        try:
            path, body = next(ex)
            while True:
                path, body = ex.send(await _ask(posts, path, body))
        except StopIteration as stop:
            return 200, msgspec.json.encode(stop.value or {})

    return handle
