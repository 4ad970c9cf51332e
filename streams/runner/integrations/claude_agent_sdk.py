"""loopwarden for the Claude Agent SDK (``pip install -e '.[claude-agent-sdk]'`` in the clone).

In-process hooks for ``ClaudeAgentOptions``::

    lw = LoopwardenHooks(client)
    options = lw.attach(ClaudeAgentOptions(...))   # PreToolUse, PostToolUse, PostToolUseFailure, Stop
    async for message in query(prompt="...", options=options): ...

The SDK runs the Claude Code CLI; its hooks call back into this process, so
every tool call (built-in or MCP) is gated on ``PreToolUse``, before it runs:

- ``allow``: the tool runs; ``PostToolUse`` publishes its ``tool_response`` as
  the model was shown it (the Claude Code hook's mapping,
  ``hooks.hosts.claude_shown``), ``PostToolUseFailure`` its error;
- ``warn``: the tool runs; the warning goes to the model as the
  ``PostToolUse`` hook's ``additionalContext`` (Claude Code shows it to the
  model right after the call's result; a hook cannot edit a built-in tool's
  result text); acknowledged;
- ``block``: ``permissionDecision: "deny"`` with the block message as its
  reason: the tool does not run and the model gets the message as that
  call's (error) result, under the model's own ``tool_use_id``;
- ``abort``: as block, with ``continue: false`` and the message as
  ``stopReason``: Claude Code ends the session (the query's result message
  follows). An abort decided on a tool's result (the post-compaction guard)
  answers ``PostToolUse`` with ``continue: false``.

Batches: Claude Code hands hooks one call at a time (no hook sees a model
message's calls together), so under the ``openclaw-latest`` profile each
call is a batch of one.

Run identity: ``agent_id`` is the constructor's (default ``claude-agent-sdk``);
``session_id`` the Claude Code session; ``run_id`` the hook input's
``prompt_id`` (one per user prompt), else the session id. ``run_end`` is
published on ``Stop`` (the agent finished its answer), and for an aborted run
with the ``continue: false`` that stops it (no ``Stop`` hook follows). Pass
``resolve=`` (a function of the hook input returning a
:class:`~loopwarden.runner.wire.RunRef`) to map them differently.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, HookMatcher

from loopwarden.hooks.hosts import claude_shown
from loopwarden.runner.integrations._gate import Gate, block_message
from loopwarden.runner.text import verdict_text
from loopwarden.runner.wire import RunRef

Resolve = Callable[[dict[str, Any]], RunRef]


class LoopwardenHooks:
    """The hooks of one client; :meth:`attach` adds them to a ``ClaudeAgentOptions``."""

    def __init__(
        self,
        client: Any,
        agent_id: str | None = None,
        *,
        resolve: Resolve | None = None,
        timeout: float | None = None,
    ) -> None:
        self.gate = Gate(client, timeout=timeout)
        self.agent_id = agent_id or "claude-agent-sdk"
        self._resolve = resolve

    def ref(self, data: dict[str, Any]) -> RunRef:
        if self._resolve is not None:
            return self._resolve(data)
        session = data.get("session_id")
        return RunRef(agent_id=self.agent_id, session_id=session, run_id=data.get("prompt_id") or session)

    def hooks(self) -> dict[str, list[HookMatcher]]:
        return {
            "PreToolUse": [HookMatcher(hooks=[self.pre_tool_use])],
            "PostToolUse": [HookMatcher(hooks=[self.post_tool_use])],
            "PostToolUseFailure": [HookMatcher(hooks=[self.post_tool_use_failure])],
            "Stop": [HookMatcher(hooks=[self.stop])],
        }

    def attach(self, options: ClaudeAgentOptions) -> ClaudeAgentOptions:
        """``options`` with these hooks first in each event's list (your own hooks stay)."""
        merged: dict[str, list[Any]] = {event: list(matchers) for event, matchers in (options.hooks or {}).items()}
        for event, matchers in self.hooks().items():
            merged[event] = matchers + merged.get(event, [])
        return dataclasses.replace(options, hooks=merged)

    async def compaction_retry(self, data: dict[str, Any], reason: str | None = None) -> None:
        """Call after the session compacted (e.g. from a ``PreCompact`` hook's input): arms the guard."""
        await self.gate.compaction_retry(self.ref(data), reason)

    async def _stop(self, ref: RunRef) -> dict[str, Any]:
        """``continue: false`` for an aborted run, which then ends here: Claude Code stops the session
        without a ``Stop`` hook."""
        abort = self.gate.aborted(ref)
        if abort is None:
            return {}
        await self.gate.end(ref)
        return {"continue_": False, "stopReason": f"[loopwarden] run stopped: {verdict_text(abort, '')}"}

    async def pre_tool_use(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        ref = self.ref(data)
        call_id = data.get("tool_use_id") or tool_use_id
        decision = await self.gate.before(ref, data["tool_name"], data.get("tool_input"), call_id)
        if decision.proceed:
            return {}
        deny = {"hookEventName": "PreToolUse", "permissionDecision": "deny"}
        deny["permissionDecisionReason"] = block_message(decision)
        return {"hookSpecificOutput": deny, **(await self._stop(ref))}

    async def post_tool_use(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        ref = self.ref(data)
        # what the model was shown of the response, mapped as the Claude Code hook maps it: the raw object's
        # saved-output path and durations made identical outputs unequal
        result = data.get("tool_response")
        if isinstance(result, dict):
            try:
                result = claude_shown(str(data.get("tool_name") or ""), result)
            except (RecursionError, TypeError, ValueError):  # not JSON-able: as it is (the gate bounds it)
                pass
        note = await self.gate.after(ref, data.get("tool_use_id") or tool_use_id, result=result)
        out: dict[str, Any] = await self._stop(ref)
        if note is not None:
            out["hookSpecificOutput"] = {"hookEventName": "PostToolUse", "additionalContext": note.strip()}
        return out

    async def post_tool_use_failure(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        ref = self.ref(data)
        await self.gate.after(ref, data.get("tool_use_id") or tool_use_id, error=data.get("error") or "error")
        return await self._stop(ref)

    async def stop(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        await self.gate.end(self.ref(data))
        return {}

    async def end(self, data: dict[str, Any]) -> None:
        """End a run Claude Code stopped without a ``Stop`` hook (an abort): pass any hook input of it."""
        await self.gate.end(self.ref(data))
