"""One ``tools/call`` through loopwarden: decide before it is forwarded, publish and annotate its response.

Transport-free: the relay (:mod:`loopwarden.mcpgate.relay`) asks :meth:`ToolGate.decide`
when a host's ``tools/call`` arrives, with who made it (a
:class:`~loopwarden.runner.wire.RunRef`), and hands :meth:`ToolGate.finished` the
server's response to it. The decision is the runner's own
(:class:`~loopwarden.runner.integrations._gate.Gate` over a
:class:`~loopwarden.runner.LoopClient` with local decisions), so a proxied host is
judged exactly as an embedded runner is.

What the host sees:

- ``block`` / ``abort``: a ``CallToolResult`` with ``isError: true`` whose one
  text item is the verdict's text; the server is not called. MCP hosts SHOULD
  hand tool-execution errors to the model, so the model reads why. After an
  abort every later call of the run is refused the same way;
- ``warn``: the server's result with the warning added where the host shows it
  (:func:`with_warning`);
- ``allow``: the server's response, the bytes it sent.

loopwarden never breaks a healthy agent: anything that fails on its side
lets the call through (counted in :class:`GateStats`, logged once); errors of
the server itself reach the host unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp.types as types
import msgspec
import pydantic
from msgspec import Raw

from loopwarden.mcpgate.settings import GateSettings
from loopwarden.runner.client import LoopClient
from loopwarden.runner.integrations._gate import Gate, block_message, warning_note
from loopwarden.runner.state import Decision
from loopwarden.runner.wire import RunRef, bounded_payload

log = logging.getLogger(__name__)

MAX_ID_CHARS = 256  # an agent or session id longer than this is cut (ids come from the host)
WARNING_KEY = "loopwarden_warning"  # the warning's key in a structuredContent object


class GateStats(msgspec.Struct, kw_only=True):
    """Counters of the proxy's own path (the decisions themselves: ``LoopClient.stats``)."""

    calls: int = 0  # tools/call requests seen
    refused: int = 0  # answered with the verdict, the server not called
    warned: int = 0  # forwarded with the warning added
    ungated_overload: int = 0  # more than max_pending in flight: forwarded without a decision
    ungated_frames: int = 0  # a frame over max_frame_bytes or a batch: forwarded without a decision
    abandoned: int = 0  # a decided call whose response never came (cancelled, evicted, disconnected)
    failed_open: int = 0  # loopwarden failed on the proxy's side: forwarded without a decision
    server_errors: int = 0  # the server answered with an error (published, passed on)


class ToolGate:
    """Decides the ``tools/call`` requests of every run the proxy serves (one per process)."""

    def __init__(self, client: LoopClient, settings: GateSettings | None = None) -> None:
        self.client = client
        self.settings = settings or GateSettings()
        self.gate = Gate(client, max_runs=self.settings.max_runs)
        self.stats = GateStats()
        self.pending = 0  # decided calls whose response has not come yet
        self._logged = False

    def ref(self, client_name: str | None, session_id: str) -> RunRef:
        """The run of a call: the configured agent id, else the client's own name, and the session."""
        agent = self.settings.agent_id or client_name or self.settings.default_agent
        return RunRef(agent_id=agent[:MAX_ID_CHARS], session_id=session_id[:MAX_ID_CHARS])

    def payload(self, value: Any) -> Raw:
        """A value as published and hashed: its JSON, or its digest beyond ``max_payload_bytes``."""
        return bounded_payload(self.client.encode(value), self.settings.max_payload_bytes)

    async def decide(self, ref: RunRef, name: str, arguments: Any) -> Decision | None:
        """The call's decision; None: it goes through undecided (overload, loopwarden's own failure).

        A decision that lets the call through counts as pending until :meth:`finished` or
        :meth:`abandon` is called with it."""
        self.stats.calls += 1
        if self.pending >= self.settings.max_pending:
            self.stats.ungated_overload += 1
            return None
        try:
            decision = await self.gate.check(ref, name, self.payload(arguments if arguments is not None else {}), None)
        except Exception:  # noqa: BLE001 - loopwarden's failure is never the agent's
            self._fail_open()
            return None
        if not decision.proceed:
            self.stats.refused += 1
            await self._quiet(self.gate.refused(decision))
            return decision
        self.pending += 1
        return decision

    async def finished(self, decision: Decision, result: Any, error: Any, closed_schema: bool = False) -> Any:
        """Publish the server's response to a decided call (its ``result``, or its JSON-RPC ``error``).

        Returns the result to send the host instead of the server's (a warned call), else None:
        the host gets the server's response as it came."""
        self.pending -= 1
        if error is not None:
            self.stats.server_errors += 1
            await self._published(decision, error=self.payload(error))
            return None
        outcome = tool_outcome(result)
        if outcome is None:  # the server asks the host for input first (or answered no tool result)
            await self._published(decision, result=self.payload(result))
            return None
        warned = decision.action == "warn"
        if result.get("isError") is True:
            self.stats.server_errors += 1
            await self._published(decision, error=self.payload(outcome))
        else:
            await self._published(decision, result=self.payload(outcome), warned=warned)
        if not warned:
            return None
        self.stats.warned += 1
        return with_warning(result, warning_note(decision).strip(), closed_schema)

    def abandon(self, decision: Decision) -> None:
        """A decided call whose response will not come (cancelled, or the connection is gone)."""
        self.pending -= 1
        self.stats.abandoned += 1

    async def _published(self, decision: Decision, *, warned: bool = False, **outcome: Any) -> None:
        await self._quiet(self.gate.finished(decision, warned=warned, **outcome))

    async def _quiet(self, awaitable: Any) -> None:
        try:
            await awaitable
        except Exception:  # noqa: BLE001
            self._fail_open()

    def _fail_open(self) -> None:
        self.stats.failed_open += 1
        if not self._logged:
            self._logged = True
            log.exception("loopwarden failed in the MCP proxy; calls go through (later failures are only counted)")

    async def end(self, ref: RunRef) -> None:
        """End one run (``run_end``): its session is over."""
        await self._quiet(self.gate.end(ref))

    async def close(self) -> None:
        """End every run (``run_end``): the host went away."""
        await self._quiet(self.gate.end_all())
        log.info("runs ended; %s", self.stats)


def tool_outcome(result: Any) -> dict[str, Any] | None:
    """What a tool result gave the host, as published and hashed: its ``content`` and
    ``structuredContent`` (not ``_meta``); None when ``result`` is no complete ``CallToolResult``
    (the SDK's type decides)."""
    if not isinstance(result, dict) or result.get("resultType", "complete") != "complete":
        return None
    try:
        types.CallToolResult.model_validate(result)
    except pydantic.ValidationError:
        return None
    return {key: result[key] for key in ("content", "structuredContent") if result.get(key) is not None}


def refusal(decision: Decision) -> dict[str, Any]:
    """A refused call's result: a tool-execution error carrying the verdict's text."""
    result = types.CallToolResult(content=[types.TextContent(type="text", text=block_message(decision))], is_error=True)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def with_warning(result: dict[str, Any], note: str, closed_schema: bool = False) -> dict[str, Any]:
    """The server's result with the warning where each host shows it: one more text item in
    ``content`` (what most hosts hand the model), and in a ``structuredContent`` object the key
    ``loopwarden_warning`` (Claude Code hands the model ``structuredContent`` when there is one),
    unless the tool's output schema forbids keys it does not name (the host would reject the result)."""
    warned = dict(result)
    warned["content"] = [*(result.get("content") or []), {"type": "text", "text": note}]
    structured = result.get("structuredContent")
    if isinstance(structured, dict) and not closed_schema:
        warned["structuredContent"] = {**structured, WARNING_KEY: note}
    return warned
