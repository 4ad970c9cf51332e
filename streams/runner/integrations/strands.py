"""loopwarden for Strands Agents (``pip install -e '.[strands]'`` in the clone).

A hook provider: ``Agent(model, tools=[...], hooks=[LoopwardenHooks(client)])``.
Every tool call is gated on ``BeforeToolCallEvent``, before the tool runs:

- ``allow``: the tool runs; ``AfterToolCallEvent`` publishes its result (or
  its exception, which Strands turns into an error result);
- ``warn``: the tool runs; the warning is appended to the result's last text
  block (a text block of its own if it has none); acknowledged;
- ``block``: the tool does not run: ``cancel_tool`` with the block message,
  which Strands gives the model as that call's (error) result, under the
  model's own ``toolUseId``;
- ``abort``: as block, and ``agent.cancel(after_current_tools=True)``: the
  calls of the model message finish (every call gets its result) and the
  invocation stops before the next model request, with
  ``stop_reason == "cancelled"`` and the final message
  ``[loopwarden] run stopped: ...``. An abort decided on a tool's result (the
  post-compaction guard) stops it the same way.

Under the ``openclaw-latest`` profile (a client deciding locally) each model
message's tool uses are admitted together on ``AfterModelCallEvent``, before
any runs (the OpenClaw release's bounded recovery); the warning is the
release's system note.

Run identity: ``agent_id`` is the constructor's, else the agent's ``name``;
``session_id`` the agent's session manager's ``session_id`` (a Strands agent
holds one conversation), else its ``agent_id``; ``run_id`` one per invocation
(``agent(...)``, ``invoke_async``, ``stream_async``), kept in the invocation
state under ``loopwarden_run_id`` (pass your own there to choose it).
``run_end`` is published on ``AfterInvocationEvent``. Pass ``resolve=`` (a
function of the hook event returning a :class:`~loopwarden.runner.wire.RunRef`)
to map them differently.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from strands.hooks import (
    AfterInvocationEvent,
    AfterModelCallEvent,
    AfterToolCallEvent,
    BeforeInvocationEvent,
    BeforeToolCallEvent,
    HookProvider,
    HookRegistry,
)

from loopwarden.runner.integrations._gate import Gate, block_message
from loopwarden.runner.text import verdict_text
from loopwarden.runner.wire import RunRef

Resolve = Callable[[Any], RunRef]
RUN_KEY = "loopwarden_run_id"


class LoopwardenHooks(HookProvider):
    """Gate every tool call of a Strands agent; cancel the invocation on abort."""

    def __init__(
        self, client: Any, agent_id: str | None = None, *, resolve: Resolve | None = None, timeout: float | None = None
    ) -> None:
        self.gate = Gate(client, timeout=timeout)
        self.agent_id = agent_id
        self._resolve = resolve

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeInvocationEvent, self._start)
        registry.add_callback(AfterInvocationEvent, self._end)
        registry.add_callback(AfterModelCallEvent, self._admit)
        registry.add_callback(BeforeToolCallEvent, self._before)
        registry.add_callback(AfterToolCallEvent, self._after)

    def ref(self, event: Any) -> RunRef:
        if self._resolve is not None:
            return self._resolve(event)
        agent = event.agent
        manager = getattr(agent, "_session_manager", None) or getattr(agent, "session_manager", None)
        session = getattr(manager, "session_id", None) or getattr(agent, "agent_id", None)
        name = self.agent_id or getattr(agent, "name", None) or "strands"
        state = event.invocation_state if isinstance(event.invocation_state, dict) else {}
        return RunRef(agent_id=name, session_id=session, run_id=state.get(RUN_KEY))

    async def compaction_retry(self, event: Any, reason: str | None = None) -> None:
        """Call after compacting the agent's messages (a hook event of the invocation): arms the guard."""
        await self.gate.compaction_retry(self.ref(event), reason)

    def _start(self, event: BeforeInvocationEvent) -> None:
        event.invocation_state.setdefault(RUN_KEY, f"run_{uuid.uuid4().hex}")

    async def _end(self, event: AfterInvocationEvent) -> None:
        await self.gate.end(self.ref(event))

    async def _admit(self, event: AfterModelCallEvent) -> None:
        """The model message's tool uses, admitted together before any runs (openclaw-latest)."""
        message = event.stop_response.message if event.stop_response is not None else None
        uses = [block["toolUse"] for block in (message or {}).get("content", ()) if "toolUse" in block]
        if uses:
            await self.gate.admit(self.ref(event), [(u["name"], u.get("input"), u["toolUseId"]) for u in uses])

    def _stop(self, event: Any) -> None:
        abort = self.gate.aborted(self.ref(event))
        if abort is not None:
            event.agent.cancel(message=f"[loopwarden] run stopped: {verdict_text(abort, '')}", after_current_tools=True)

    async def _before(self, event: BeforeToolCallEvent) -> None:
        use = event.tool_use
        decision = await self.gate.before(self.ref(event), use["name"], use.get("input"), use["toolUseId"])
        if decision.proceed:
            return
        event.cancel_tool = block_message(decision)
        self._stop(event)

    async def _after(self, event: AfterToolCallEvent) -> None:
        call_id = event.tool_use["toolUseId"]
        if event.exception is not None:
            await self.gate.after(self.ref(event), call_id, error=event.exception)
        else:
            note = await self.gate.after(self.ref(event), call_id, result=_text(event.result))
            if note is not None:
                content = list(event.result.get("content") or [])
                if content and "text" in content[-1]:
                    content[-1] = {**content[-1], "text": content[-1]["text"] + note}
                else:
                    content.append({"text": note.lstrip()})
                event.result = {**event.result, "content": content}
        self._stop(event)  # also an abort completed by this outcome


def _text(result: Any) -> Any:
    """A tool result's text (what the model reads), else its content as it is."""
    content = result.get("content") or []
    texts = [block["text"] for block in content if "text" in block]
    return "\n".join(texts) if len(texts) == len(content) else content
