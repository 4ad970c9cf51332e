"""One ``tools/call`` through loopwarden: decide, refuse or forward, publish, annotate.

Transport-free: the proxy (:mod:`loopwarden.mcpgate.proxy`) hands each call
here with who made it (a :class:`~loopwarden.runner.wire.RunRef`) and a
``forward`` coroutine that calls the wrapped server. The decision is the
runner's own (:class:`~loopwarden.runner.integrations._gate.Gate` over a
:class:`~loopwarden.runner.LoopClient` with local decisions), so a proxied
host is judged exactly as an embedded runner is.

What the host sees:

- ``block`` / ``abort``: a ``CallToolResult`` with ``isError: true`` whose one
  text item is the verdict's text (built from its fields); the server is not
  called. MCP hosts SHOULD hand tool-execution errors to the model, so the
  model reads why. After an abort every later call of the run is refused the
  same way;
- ``warn``: the server's result with one more text item, the warning;
- ``allow``: the server's result untouched.

loopwarden never breaks a healthy agent: anything that fails on its side
lets the call through (counted in :class:`GateStats`, logged once); errors of
the server itself reach the host unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp.types as types
import msgspec
from msgspec import Raw

from loopwarden.mcpgate.settings import GateSettings
from loopwarden.runner.client import LoopClient
from loopwarden.runner.integrations._gate import Gate, block_message, warning_note
from loopwarden.runner.state import Decision
from loopwarden.runner.wire import RunRef, bounded_payload

log = logging.getLogger(__name__)

MAX_ID_CHARS = 256  # an agent or session id longer than this is cut (ids come from the host)

Forward = Callable[[], Awaitable[Any]]  # a CallToolResult, or the server's request for input


class GateStats(msgspec.Struct, kw_only=True):
    """Counters of the proxy's own path (the decisions themselves: ``LoopClient.stats``)."""

    calls: int = 0  # tools/call requests seen
    refused: int = 0  # answered with the verdict, the server not called
    warned: int = 0  # forwarded with the warning appended
    ungated_overload: int = 0  # more than max_pending in flight: forwarded without a decision
    failed_open: int = 0  # loopwarden failed on the proxy's side: forwarded without a decision
    server_errors: int = 0  # the server answered with an error (published, passed on)


class ToolGate:
    """Decides the ``tools/call`` requests of every run the proxy serves (one per process)."""

    def __init__(self, client: LoopClient, settings: GateSettings | None = None) -> None:
        self.client = client
        self.settings = settings or GateSettings()
        self.gate = Gate(client, max_runs=self.settings.max_runs)
        self.stats = GateStats()
        self._pending = 0
        self._logged = False

    def ref(self, client_name: str | None, session_id: str) -> RunRef:
        """The run of a call: the configured agent id, else the client's own name, and the session."""
        agent = self.settings.agent_id or client_name or self.settings.default_agent
        return RunRef(agent_id=agent[:MAX_ID_CHARS], session_id=session_id[:MAX_ID_CHARS])

    def payload(self, value: Any) -> Raw:
        """A value as published and hashed: its JSON, or its digest beyond ``max_payload_bytes``."""
        return bounded_payload(self.client.encode(value), self.settings.max_payload_bytes)

    async def call(self, ref: RunRef, name: str, arguments: Any, forward: Forward) -> Any:
        """The host's answer to one call (``forward`` runs the server's tool)."""
        self.stats.calls += 1
        if self._pending >= self.settings.max_pending:
            self.stats.ungated_overload += 1
            return await forward()
        self._pending += 1
        try:
            try:
                decision = await self.gate.check(
                    ref, name, self.payload(arguments if arguments is not None else {}), None
                )
            except Exception:  # noqa: BLE001 - loopwarden's failure is never the agent's
                self._fail_open()
                return await forward()
            if not decision.proceed:
                self.stats.refused += 1
                await self.gate.refused(decision)
                return refusal(decision)
            return await self._forward(decision, forward)
        finally:
            self._pending -= 1

    async def _forward(self, decision: Decision, forward: Forward) -> Any:
        try:
            result = await forward()
        except Exception as exc:
            self.stats.server_errors += 1
            await self._published(decision, error=f"{type(exc).__name__}: {exc}")
            raise
        if not isinstance(result, types.CallToolResult):  # the server asks the host for input first
            await self._published(decision, result=self.payload(result.model_dump(by_alias=True, mode="json")))
            return result
        warned = decision.action == "warn"
        if result.is_error:
            self.stats.server_errors += 1
            await self._published(decision, error=self._outcome(result))
        else:
            await self._published(decision, result=self._outcome(result), warned=warned)
        if warned:
            self.stats.warned += 1
            result = with_warning(result, decision)
        return result

    def _outcome(self, result: types.CallToolResult) -> Raw:
        """What the server returned, as published: content and structured content (not ``_meta``)."""
        dumped = result.model_dump(
            by_alias=True, mode="json", exclude_none=True, include={"content", "structured_content"}
        )
        return self.payload(dumped)

    async def _published(self, decision: Decision, *, warned: bool = False, **outcome: Any) -> None:
        try:
            await self.gate.finished(decision, warned=warned, **outcome)
        except Exception:  # noqa: BLE001
            self._fail_open()

    def _fail_open(self) -> None:
        self.stats.failed_open += 1
        if not self._logged:
            self._logged = True
            log.exception("loopwarden failed in the MCP proxy; calls go through (later failures are only counted)")

    async def close(self) -> None:
        """End every run (``run_end``): the host went away."""
        try:
            await self.gate.end_all()
        except Exception:  # noqa: BLE001
            self._fail_open()
        log.info("runs ended; %s", self.stats)


def refusal(decision: Decision) -> types.CallToolResult:
    """A refused call's result: a tool-execution error carrying the verdict's text."""
    return types.CallToolResult(content=[types.TextContent(type="text", text=block_message(decision))], is_error=True)


def with_warning(result: types.CallToolResult, decision: Decision) -> types.CallToolResult:
    """The server's result with the warning as one more text item."""
    note = types.TextContent(type="text", text=warning_note(decision).strip())
    return result.model_copy(update={"content": [*result.content, note]})
