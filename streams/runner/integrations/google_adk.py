"""loopwarden for Google's Agent Development Kit (``pip install -e '.[google-adk]'`` in the clone).

A runner plugin: ``Runner(..., plugins=[LoopwardenPlugin(client)])`` (or an
``App``'s ``plugins``) gates every tool call of every agent the runner runs,
in ``before_tool_callback``, before the tool runs:

- ``allow``: the tool runs; ``after_tool_callback`` publishes its response,
  ``on_tool_error_callback`` its exception (which then goes on as ADK's own);
- ``warn``: the tool runs; the warning is appended to the response's
  ``result`` text (ADK's key for a tool that returns a plain value), or added
  as a ``loopwarden`` key beside a structured response; acknowledged;
- ``block``: the tool does not run; ``{"result": <block message>}`` is the
  call's function response (the model's own call id);
- ``abort``: as block, and the invocation ends: the next model request is
  answered by ``before_model_callback`` itself (ADK's way for a callback to
  skip the model) with a final text, ``[loopwarden] run stopped: ...``, so the
  model is not asked again and the invocation finishes. An abort decided on a
  tool's result (the post-compaction guard) ends it the same way.

Under the ``openclaw-latest`` profile (a client deciding locally) each model
response's function calls are admitted together in ``after_model_callback``,
before any runs (the OpenClaw release's bounded recovery); the warning is the
release's system note. A call without an id gets ADK's own kind of id there,
so its decision is found again.

Run identity: ``agent_id`` is the constructor's, else the calling agent's
name; ``session_id`` the ADK session id; ``run_id`` the invocation id (each
``run_async`` is an invocation). ``run_end`` is published in
``after_run_callback`` (``on_run_error_callback`` for an invocation that
fails). Pass ``resolve=`` (a function of the ``ToolContext``,
``CallbackContext`` or, at the run's end, ``InvocationContext``, returning a
:class:`~loopwarden.runner.wire.RunRef`) to map them differently.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from google.adk.flows.llm_flows.functions import generate_client_function_call_id
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types

from loopwarden.runner.integrations._gate import Gate, block_message
from loopwarden.runner.text import verdict_text
from loopwarden.runner.wire import RunRef

Resolve = Callable[[Any], RunRef]


class LoopwardenPlugin(BasePlugin):
    """Gate every tool call of an ADK runner; end the invocation on abort."""

    def __init__(
        self,
        client: Any,
        agent_id: str | None = None,
        *,
        resolve: Resolve | None = None,
        timeout: float | None = None,
        name: str = "loopwarden",
    ) -> None:
        super().__init__(name=name)
        self.gate = Gate(client, timeout=timeout)
        self.agent_id = agent_id
        self._resolve = resolve
        self._agents: OrderedDict[str, str] = OrderedDict()  # invocation id -> the root agent's name

    def ref(self, ctx: Any) -> RunRef:
        if self._resolve is not None:
            return self._resolve(ctx)
        invocation = ctx.invocation_id
        name = self.agent_id or self._agents.get(invocation) or ctx.agent_name or "google-adk"
        return RunRef(agent_id=name, session_id=ctx.session.id, run_id=invocation)

    async def compaction_retry(self, ctx: Any, reason: str | None = None) -> None:
        """Call after compacting the invocation's history (a callback's context): arms the guard."""
        await self.gate.compaction_retry(self.ref(ctx), reason)

    async def before_run_callback(self, *, invocation_context: Any) -> None:
        agent = getattr(invocation_context, "agent", None)
        if agent is not None:  # one run per invocation, named by its root agent (sub-agents share it)
            self._agents[invocation_context.invocation_id] = agent.name
            if len(self._agents) > 4096:  # invocations that never reached their end stay bounded
                self._agents.popitem(last=False)
        return None

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        invocation = invocation_context.invocation_id
        if self._resolve is not None:
            ref = self._resolve(invocation_context)
        else:
            name = self.agent_id or self._agents.get(invocation) or "google-adk"
            ref = RunRef(agent_id=name, session_id=invocation_context.session.id, run_id=invocation)
        self._agents.pop(invocation, None)
        await self.gate.end(ref)

    async def before_model_callback(self, *, callback_context: Any, llm_request: Any) -> Any:
        """An aborted run asks the model nothing more: a final answer of ours ends the invocation."""
        abort = self.gate.aborted(self.ref(callback_context))
        if abort is None:
            return None
        text = f"[loopwarden] run stopped: {verdict_text(abort, '')}"
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))

    async def on_run_error_callback(self, *, invocation_context: Any, error: Exception) -> None:
        await self.after_run_callback(invocation_context=invocation_context)  # a failed invocation ends too

    async def after_model_callback(self, *, callback_context: Any, llm_response: Any) -> None:
        """The response's function calls, admitted together before any runs (openclaw-latest)."""
        parts = getattr(getattr(llm_response, "content", None), "parts", None) or ()
        calls = []
        for part in parts:
            call = getattr(part, "function_call", None)
            if call is None:
                continue
            if not call.id:
                call.id = generate_client_function_call_id()  # ADK keeps an id it finds
            calls.append((call.name, dict(call.args or {}), call.id))
        if calls:
            await self.gate.admit(self.ref(callback_context), calls)
        return None

    async def before_tool_callback(self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any) -> Any:
        decision = await self.gate.before(self.ref(tool_context), tool.name, tool_args, tool_context.function_call_id)
        if decision.proceed:
            return None
        return {"result": block_message(decision)}

    async def after_tool_callback(self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, result: Any) -> Any:
        note = await self.gate.after(self.ref(tool_context), tool_context.function_call_id, result=result)
        if note is None:
            return None
        response = dict(result) if isinstance(result, dict) else {"result": result}
        if isinstance(response.get("result"), str):
            response["result"] += note
        else:
            response["loopwarden"] = note.lstrip()
        return response

    async def on_tool_error_callback(
        self, *, tool: Any, tool_args: dict[str, Any], tool_context: Any, error: Exception
    ) -> Any:
        await self.gate.after(self.ref(tool_context), tool_context.function_call_id, error=error)
        return None  # ADK goes on as without the plugin
