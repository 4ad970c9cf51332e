"""One host connection's frames, both ways: forwarded as they came, gated where a decision is due.

A :class:`Relay` sits between one host connection and one connection to the wrapped server
(whatever carries them: :mod:`loopwarden.mcpgate.proxy`). It reads the head of a frame only
when it must (:mod:`loopwarden.mcpgate.frames`):

- host → server: ``tools/call`` is decided (a refused call is answered here, the server never
  sees it); ``initialize`` names the host (``clientInfo.name``) and starts a new run;
  ``tools/list`` is remembered so that its response's output schemas can be read;
  ``notifications/cancelled`` ends a decided call that will get no response;
- server → host: the response to a decided call is published, and replaced when a warning is
  due; a ``tools/list`` response tells which tools forbid extra keys in ``structuredContent``.

Every other frame, and every frame over ``max_frame_bytes``, goes through as the same bytes.

Who a call belongs to: the agent is ``--agent-id`` or the host's name; the run is this
connection, and a new one at each ``initialize`` on it (a host that re-initializes starts a
new session). On 2026-07-28 requests, which carry no session, the host's name comes from the
request's own ``_meta`` envelope.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from loopwarden.mcpgate import frames
from loopwarden.mcpgate.gate import ToolGate, refusal
from loopwarden.runner.state import Decision

Send = Callable[[bytes], Awaitable[None]]

CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"  # the 2026-07-28 request envelope's host name
MAX_TOOL_SCHEMAS = 10_000  # tools whose output schema is remembered, per connection
LATER_ROUND_KEYS = ("requestState", "inputResponses")  # a later round of a call already decided


def new_session() -> str:
    return f"mcp-{uuid.uuid4().hex[:16]}"


class Relay:
    """The frames of one host connection and its server connection."""

    def __init__(self, gate: ToolGate, to_host: Send, to_server: Send, session: str | None = None) -> None:
        self.gate = gate
        self.to_host = to_host
        self.to_server = to_server
        self.session = session or new_session()
        self.client_name: str | None = None
        self.decided = False  # a call of this session was decided (so it has a run to end)
        self.calls: OrderedDict[bytes, tuple[Decision, str]] = OrderedDict()  # request id -> decision, tool
        self.lists: OrderedDict[bytes, None] = OrderedDict()  # tools/list requests in flight
        self.closed_tools: OrderedDict[str, None] = OrderedDict()  # output schema with additionalProperties false

    async def from_host(self, frame: bytes) -> None:
        head = self._head(frame)
        method = head.method if head is not None else None
        if method == "tools/call" and head is not None and head.id:
            answer = await self._call(head)
            if answer is not None:
                await self.to_host(answer)
                return
        elif method == "initialize":
            if self.decided:  # the host starts a new session on this connection: the last one's run ends
                await self.gate.end(self.gate.ref(self.client_name, self.session))
            params = frames.decode(head.params) if head is not None else None
            self.client_name = _name((params or {}).get("clientInfo") if isinstance(params, dict) else None)
            self.session = new_session()
            self.decided = False
        elif method == "tools/list" and head is not None and head.id:
            _bounded_add(self.lists, bytes(head.id), self.gate.settings.max_pending)
        elif method == "notifications/cancelled" and head is not None:
            params = frames.decode(head.params)
            if isinstance(params, dict) and "requestId" in params:
                self._abandon(msgspec.json.encode(params["requestId"]))
        await self.to_server(frame)

    async def from_server(self, frame: bytes) -> None:
        if self.calls or self.lists:
            head = self._head(frame)
            if head is not None and head.method is None and head.id:
                key = bytes(head.id)
                call = self.calls.pop(key, None)
                if call is not None:
                    decision, tool = call
                    result = await self.gate.finished(
                        decision, frames.decode(head.result), frames.decode(head.error), tool in self.closed_tools
                    )
                    if result is not None:
                        frame = frames.response(head.id, result)
                elif key in self.lists:
                    del self.lists[key]
                    self._schemas(frames.decode(head.result))
        await self.to_host(frame)

    def close(self) -> None:
        """The connection is gone: its decided calls will get no response."""
        for decision, _tool in self.calls.values():
            self.gate.abandon(decision)
        self.calls.clear()

    async def _call(self, head: frames.Head) -> bytes | None:
        """Decide a ``tools/call``: the refusal to answer with, or None to forward it."""
        params = frames.decode(head.params)
        if not isinstance(params, dict) or not isinstance(params.get("name"), str):
            return None  # not a call the server can run either: its error reaches the host
        if any(params.get(key) is not None for key in LATER_ROUND_KEYS):
            return None
        meta = params.get("_meta")
        name = _name(meta.get(CLIENT_INFO_META_KEY)) if isinstance(meta, dict) else None
        ref = self.gate.ref(name or self.client_name, self.session)
        decision = await self.gate.decide(ref, params["name"], params.get("arguments"))
        self.decided = True
        if decision is None:
            return None
        if not decision.proceed:
            return frames.response(head.id, refusal(decision))
        key = bytes(head.id)
        self._abandon(key)  # a host reusing an id in flight: the earlier call will not be matched
        self.calls[key] = (decision, params["name"])
        if len(self.calls) > self.gate.settings.max_pending:
            _key, (old, _tool) = self.calls.popitem(last=False)
            self.gate.abandon(old)
        return None

    def _head(self, frame: bytes) -> frames.Head | None:
        if len(frame) > self.gate.settings.max_frame_bytes:
            self.gate.stats.ungated_frames += 1
            return None
        head = frames.peek(frame)
        if head is None and frame.lstrip()[:1] == b"[":
            self.gate.stats.ungated_frames += 1  # a batch (2025-03-26): passed through undecided
        return head

    def _abandon(self, key: bytes) -> None:
        call = self.calls.pop(key, None)
        if call is not None:
            self.gate.abandon(call[0])

    def _schemas(self, result: Any) -> None:
        """Remember the tools whose output schema forbids keys it does not name."""
        tools = result.get("tools") if isinstance(result, dict) else None
        for tool in tools if isinstance(tools, list) else ():
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                continue
            schema = tool.get("outputSchema")
            if isinstance(schema, dict) and schema.get("additionalProperties") is False:
                _bounded_add(self.closed_tools, tool["name"], MAX_TOOL_SCHEMAS)
            else:
                self.closed_tools.pop(tool["name"], None)


def _name(info: Any) -> str | None:
    name = info.get("name") if isinstance(info, dict) else None
    return name if isinstance(name, str) and name else None


def _bounded_add(table: OrderedDict, key: Any, bound: int) -> None:
    table[key] = None
    if len(table) > bound:
        table.popitem(last=False)
