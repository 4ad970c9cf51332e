"""A handle on one registered run: its events, its gate, its state and its verdicts.

Thin sugar over :class:`~loopwarden.runner.client.LoopClient` so runner code
never repeats the run's identity (agent, session, run id) on every call.
"""

from __future__ import annotations

from typing import Any, Protocol

from msgspec import UNSET

from loopwarden.runner import wire
from loopwarden.runner.routing import VerdictCallback, VerdictStream
from loopwarden.runner.state import Decision, RunState
from loopwarden.schemas.events import ToolCall, ToolResult
from loopwarden.schemas.verdicts import Verdict


class RunHost(Protocol):
    """What a run needs of its client (:class:`~loopwarden.runner.client.LoopClient`), named here
    so that this module does not import the client that imports it."""

    encode: wire.PayloadEncoder

    def state(self, key: wire.Ident) -> RunState | None: ...
    def register(self, key: wire.Ident, callback: VerdictCallback | None = None) -> RunState: ...
    def unregister(self, key: wire.Ident) -> None: ...
    def verdicts(self, key: wire.Ident) -> VerdictStream: ...
    async def check(self, call: ToolCall, timeout: float | None = None) -> Decision: ...
    async def tool_call(
        self, ref: wire.RunRef, tool_name: str, params: Any = None, *, tool_call_id: str | None = None
    ) -> ToolCall: ...
    async def tool_result(self, call: ToolCall | Decision, *, result: Any = ..., error: Any = ...) -> ToolResult: ...
    async def ack(self, verdict: Verdict, outcome: str = "applied", detail: str | None = None) -> bool: ...
    async def _ack_once(self, verdict: Verdict, outcome: str, detail: str) -> None: ...
    async def compaction_retry(self, ref: wire.RunRef, reason: str | None = None) -> None: ...
    async def run_end(self, ref: wire.RunRef) -> None: ...


class Run:
    """One registered run (made by :meth:`LoopClient.run`)."""

    def __init__(self, client: RunHost, ref: wire.RunRef) -> None:
        self.client = client
        self.ref = ref
        self.ident = ref.ident  # the run in its client: (run key, agent, session) (:attr:`wire.RunRef.ident`)

    @property
    def key(self) -> str:
        return self.ref.key

    @property
    def state(self) -> RunState:
        state = self.client.state(self.ident)
        return state if state is not None else RunState()

    @property
    def aborted(self) -> Verdict | None:
        return self.state.aborted

    def on_verdict(self, callback: VerdictCallback) -> None:
        self.client.register(self.ident, callback)

    def verdicts(self) -> VerdictStream:
        return self.client.verdicts(self.ident)

    def call(self, tool_name: str, params: Any = None, tool_call_id: str | None = None) -> ToolCall:
        """Build (not publish) a ``tool_call`` of this run."""
        return wire.tool_call(self.ref, tool_name, params, tool_call_id=tool_call_id, encode=self.client.encode)

    async def check(
        self, tool_name: str, params: Any = None, *, tool_call_id: str | None = None, timeout: float | None = None
    ) -> Decision:
        return await self.client.check(self.call(tool_name, params, tool_call_id), timeout)

    async def tool_call(self, tool_name: str, params: Any = None, *, tool_call_id: str | None = None) -> ToolCall:
        return await self.client.tool_call(self.ref, tool_name, params, tool_call_id=tool_call_id)

    async def tool_result(self, call: ToolCall | Decision, *, result: Any = UNSET, error: Any = UNSET) -> ToolResult:
        """Publish the call's outcome; given the gate's Decision, ack a block/abort it answered."""
        return await self.client.tool_result(call, result=result, error=error)

    async def ack(self, verdict: Verdict | Decision, outcome: str = "applied", detail: str | None = None) -> bool:
        """Acknowledge a verdict the runner acted on (e.g. a warning shown to the model)."""
        if isinstance(verdict, Decision):
            if verdict.verdict is None:
                return False
            verdict = verdict.verdict
        return await self.client.ack(verdict, outcome, detail)

    async def compaction_retry(self, reason: str | None = None) -> None:
        await self.client.compaction_retry(self.ref, reason)

    async def end(self) -> None:
        """Publish ``run_end`` (after acking an abort: ending the run is how it is obeyed) and
        stop delivering this run's verdicts."""
        aborted = self.aborted
        if aborted is not None:
            await self.client._ack_once(aborted, "applied", "abort: run ended")
        await self.client.run_end(self.ref)
        self.client.unregister(self.ident)
