"""loopwarden for PydanticAI (``pip install -e '.[pydantic-ai]'`` in the clone).

A capability: ``Agent(model, tools=[...], capabilities=[LoopwardenCapability(client)])``.
Every tool call goes through ``wrap_tool_execute``, before the tool runs:

- ``allow``: the tool runs; its return value (or exception) is published;
- ``warn``: the tool runs; the warning is appended to a text result, or for
  any other result sent alongside it as the ``ToolReturn``'s ``content``
  (PydanticAI gives that to the model with the result); acknowledged;
- ``block``: the tool does not run; the block message is returned as that
  call's result (the model's own tool call id);
- ``abort``: as block, and ``ctx.cancel()``: the run ends with
  ``RunCancelled``. An abort decided on a tool's result (the post-compaction
  guard, when the client decides locally) cancels the run right after that
  result.

Under the ``openclaw-latest`` profile (a client deciding locally) each model
response's tool calls are admitted together in ``after_model_request``,
before any of them runs (the OpenClaw release's bounded recovery: the run's
first critical refuses the whole batch, the second cancels the run); the
warning is the release's system note.

How the caller learns that a run was aborted: ``agent.run`` raises
``RunCancelled``; ``capability.gate.aborted(capability.ref(ctx))`` (or the
client's ``run.aborted``) holds the abort verdict. With a client that
decides locally (``LoopClient(config=...)``) no call waits for the broker.

Run identity: ``agent_id`` is the constructor's, else the agent's ``name``;
``session_id`` is the run's ``conversation_id``; ``run_id`` its ``run_id``
(``agent.run(..., conversation_id=..., run_id=...)``, or the ones PydanticAI
generates). Pass ``resolve=`` (a function of the ``RunContext`` returning a
:class:`~loopwarden.runner.wire.RunRef`) to map them differently. The run ends
(``run_end``) when the agent run does, even cancelled (``wrap_run``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ToolReturn

from loopwarden.runner.integrations._gate import Gate, block_message, warning_note
from loopwarden.runner.wire import RunRef

Resolve = Callable[[Any], RunRef]


class LoopwardenCapability(AbstractCapability[Any]):
    """Gate every tool call of a PydanticAI agent; cancel the run on abort."""

    def __init__(
        self,
        client: Any,
        agent_id: str | None = None,
        *,
        resolve: Resolve | None = None,
        timeout: float | None = None,
        end_runs: bool = True,
    ) -> None:
        self.gate = Gate(client, timeout=timeout)
        self.agent_id = agent_id
        self._resolve = resolve
        self.end_runs = end_runs

    def ref(self, ctx: Any) -> RunRef:
        if self._resolve is not None:
            return self._resolve(ctx)
        agent = getattr(ctx, "agent", None)
        name = self.agent_id or getattr(agent, "name", None) or "pydantic-ai"
        return RunRef(agent_id=name, session_id=ctx.conversation_id, run_id=ctx.run_id)

    async def compaction_retry(self, ctx: Any, reason: str | None = None) -> None:
        """Call after compacting the run's history (e.g. in a history processor): arms the guard."""
        await self.gate.compaction_retry(self.ref(ctx), reason)

    async def wrap_run(self, ctx: Any, *, handler: Any) -> Any:
        try:
            return await handler()
        finally:
            if self.end_runs:
                await asyncio.shield(self.gate.end(self.ref(ctx)))

    async def after_model_request(self, ctx: Any, *, request_context: Any, response: Any) -> Any:
        """The response's tool calls, admitted together before any runs (bounded recovery, openclaw-latest)."""
        calls = [(c.tool_name, c.args_as_dict(), c.tool_call_id) for c in getattr(response, "tool_calls", None) or ()]
        if calls:
            await self.gate.admit(self.ref(ctx), calls)
        return response

    async def wrap_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: dict[str, Any], handler: Any) -> Any:
        decision = await self.gate.decide(self.ref(ctx), call.tool_name, call.args_as_dict(), call.tool_call_id)
        if not decision.proceed:
            await self.gate.refused(decision)
            if decision.action == "abort":
                ctx.cancel()
            return block_message(decision)
        try:
            result = await handler(args)
        except Exception as exc:
            await self.gate.finished(decision, error=exc)
            raise
        warned = decision.action == "warn"
        await self.gate.finished(decision, result=result, warned=warned)
        if self.gate.run(decision_ref := self.ref(ctx)).aborted is not None:
            ctx.cancel()  # the outcome completed a loop that ends the run (decided on the result)
            del decision_ref
        if not warned:
            return result
        note = warning_note(decision)
        if isinstance(result, str):
            return result + note
        return ToolReturn(return_value=result, content=note.lstrip())
