"""loopwarden for LlamaIndex workflow agents (``pip install -e '.[llama-index]'`` in the clone).

LlamaIndex's agents (``FunctionAgent``, ``ReActAgent``, ``AgentWorkflow``)
have no hook before a tool runs, so the gate wraps the tools, and
:meth:`LoopwardenTools.run` runs the agent::

    lw = LoopwardenTools(client)
    agent = FunctionAgent(llm=llm, tools=lw.wrap([lookup, ...]), name="researcher")
    result = await lw.run(agent, "...", session_id="t-1")   # run_end included

Each wrapped tool asks the gate before the tool it wraps runs:

- ``allow``: the tool runs; its output (or exception) is published, and the
  agent gets it as usual (an exception as LlamaIndex's error output);
- ``warn``: the tool runs; the warning is appended to its output's last text
  block (a text block of its own after any other); acknowledged;
- ``block``: the tool does not run; the block message is that call's output;
- ``abort``: as block, and the workflow run is cancelled (``cancel_run``):
  :meth:`LoopwardenTools.run` raises ``WorkflowCancelledByUser``, the model is
  not asked again. An abort decided on a tool's output (the post-compaction
  guard) cancels the run the same way.

What LlamaIndex does not let a tool see: the model's tool call id (a call
gets an id of its own, ``li-...``) and the model message's other calls (so
under the ``openclaw-latest`` profile each call is a batch of one).

Run identity: ``agent_id`` is the constructor's, else the agent's ``name``;
``session_id`` and ``run_id`` what :meth:`~LoopwardenTools.run` is given (a
run id of its own by default: one per call). A wrapped tool called outside
it belongs to one run per agent name that never ends.
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import TextBlock
from llama_index.core.tools import FunctionTool, ToolOutput

from loopwarden.runner.integrations._gate import Gate, block_message
from loopwarden.runner.wire import RunRef


class _Scope:
    """One :meth:`LoopwardenTools.run`: its run and its workflow handler (to cancel it)."""

    __slots__ = ("ref", "handler")

    def __init__(self, ref: RunRef) -> None:
        self.ref = ref
        self.handler: Any = None


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("loopwarden_llama_index_run", default=None)


class LoopwardenTools:
    """Gated tools and the runs of one client."""

    def __init__(self, client: Any, agent_id: str | None = None, *, timeout: float | None = None) -> None:
        self.gate = Gate(client, timeout=timeout)
        self.agent_id = agent_id
        self._cancels: set[asyncio.Task[Any]] = set()

    def ref(self) -> RunRef:
        scope = _SCOPE.get()
        if scope is not None:
            return scope.ref
        return RunRef(agent_id=self.agent_id or "llama-index", session_id=None, run_id=None)

    def wrap(self, tools: Sequence[Any]) -> list[FunctionTool]:
        """Each tool (a ``BaseTool`` or a function) behind the gate, with its own name and schema."""
        return [
            self._wrap(FunctionTool.from_defaults(t) if callable(t) and not hasattr(t, "acall") else t) for t in tools
        ]

    def _wrap(self, tool: Any) -> FunctionTool:
        name = tool.metadata.get_name()

        async def gated(**kwargs: Any) -> ToolOutput:
            ref = self.ref()
            call_id = f"li-{uuid.uuid4().hex}"
            decision = await self.gate.before(ref, name, kwargs, call_id)
            if not decision.proceed:
                self._cancel_if_aborted(ref)
                text = block_message(decision)
                return ToolOutput(content=text, tool_name=name, raw_input=kwargs, raw_output=text, is_error=True)
            try:
                output = await tool.acall(**kwargs)
            except Exception as exc:
                await self.gate.after(ref, call_id, error=exc)
                raise
            if output.is_error:
                note = await self.gate.after(ref, call_id, error=output.exception or output.content)
            else:
                note = await self.gate.after(ref, call_id, result=output.content)
            self._cancel_if_aborted(ref)
            if note is not None:
                blocks = list(output.blocks)
                if blocks and isinstance(blocks[-1], TextBlock):
                    blocks[-1] = TextBlock(text=blocks[-1].text + note)
                else:
                    blocks.append(TextBlock(text=note.lstrip()))
                output.blocks = blocks
            return output

        return FunctionTool(async_fn=gated, metadata=tool.metadata)

    def _cancel_if_aborted(self, ref: RunRef) -> None:
        scope = _SCOPE.get()
        if self.gate.aborted(ref) is None or scope is None or scope.handler is None:
            return
        task = asyncio.get_running_loop().create_task(scope.handler.cancel_run())
        self._cancels.add(task)  # keep it alive until done
        task.add_done_callback(self._cancels.discard)

    async def run(
        self,
        agent: Any,
        user_msg: Any = None,
        *,
        session_id: str | None = None,
        run_id: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """``agent.run(user_msg, **kwargs)`` as one loopwarden run, ended (``run_end``) when it returns or
        raises; an abort cancels it (``WorkflowCancelledByUser``)."""
        name = self.agent_id or getattr(agent, "name", None) or "llama-index"
        scope = _Scope(RunRef(agent_id=name, session_id=session_id, run_id=run_id or f"run_{uuid.uuid4().hex}"))
        token = _SCOPE.set(scope)
        try:
            scope.handler = agent.run(user_msg=user_msg, **kwargs)
            return await scope.handler
        finally:
            _SCOPE.reset(token)
            await self.gate.end(scope.ref)

    async def compaction_retry(self, ref: RunRef | None = None, reason: str | None = None) -> None:
        """Report that the run compacted its history and retries (inside :meth:`run`: the current run)."""
        await self.gate.compaction_retry(ref or self.ref(), reason)
