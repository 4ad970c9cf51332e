"""loopwarden for LangChain v1 agents and LangGraph graphs (``pip install 'loopwarden[langchain]'``).

``create_agent(model, tools, middleware=[LoopwardenMiddleware(client, agent_id="coder")])``
gates every tool call before it runs (``awrap_tool_call``):

- ``allow``: the tool runs; its result (or error) is published;
- ``warn``: the tool runs; the warning is appended to that call's
  ``ToolMessage`` content (text, or one more text block), so the model reads
  it with the result; the warning is acknowledged;
- ``block``: the tool does not run; the model gets the block message as that
  call's ``ToolMessage`` (``status="error"``, the model's own call id);
- ``abort``: as block, and ``before_model`` jumps to the end: the agent
  stops without another model call.

In a hand-built LangGraph graph use the same gate on the tool node:
``ToolNode(tools, awrap_tool_call=LoopwardenMiddleware(client).awrap_tool_call)``
(its ``abefore_model`` is then yours to call in the model node, or check
``middleware.aborted(config)``).

Run identity: ``agent_id`` is the constructor's; ``session_id`` is the
LangGraph thread id (``config["configurable"]["thread_id"]``); ``run_id``
is the invocation's run id (``config["run_id"]``, as LangGraph's
``execution_info.run_id`` reports it). Without either, every invocation of
the agent is one run (keyed by ``agent_id``). Pass ``resolve=`` (a function of
the LangGraph runtime or tool runtime returning a
:class:`~loopwarden.runner.wire.RunRef`) to map them differently. The run ends
(``run_end``) when the agent finishes (``after_agent``) unless
``end_runs=False``. Async only (``ainvoke``/``astream``): the client is asyncio.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, hook_config
from langchain_core.messages import ToolMessage

from loopwarden.runner.integrations._gate import Gate, block_message, warning_note
from loopwarden.runner.wire import RunRef

Resolve = Callable[[Any], RunRef]


def thread_and_run(runtime: Any) -> tuple[str | None, str | None]:
    """(thread id, run id) of the current LangGraph execution, if it has them."""
    info = getattr(runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None)
    run = getattr(info, "run_id", None)
    config = getattr(runtime, "config", None)
    if config is None:
        try:
            from langgraph.config import get_config

            config = get_config()
        except RuntimeError:  # outside a runnable context
            config = None
    if isinstance(config, dict):
        thread = thread or (config.get("configurable") or {}).get("thread_id")
        run = run or config.get("run_id")
    return (str(thread) if thread is not None else None, str(run) if run is not None else None)


def _with_note(message: Any, note: str) -> Any:
    """The ToolMessage with the warning appended to its content."""
    if not isinstance(message, ToolMessage):
        return message
    content = message.content
    if isinstance(content, str):
        content = content + note
    else:
        content = [*content, {"type": "text", "text": note.lstrip()}]
    return message.model_copy(update={"content": content})


class LoopwardenMiddleware(AgentMiddleware):
    """Gate every tool call of a ``create_agent`` agent; end the run on abort."""

    def __init__(
        self,
        client: Any,
        agent_id: str = "langchain",
        *,
        resolve: Resolve | None = None,
        timeout: float | None = None,
        end_runs: bool = True,
    ) -> None:
        super().__init__()
        self.gate = Gate(client, timeout=timeout)
        self.agent_id = agent_id
        self._resolve = resolve
        self.end_runs = end_runs

    def ref(self, runtime: Any) -> RunRef:
        if self._resolve is not None:
            return self._resolve(runtime)
        thread, run = thread_and_run(runtime)
        return RunRef(agent_id=self.agent_id, session_id=thread, run_id=run)

    def aborted(self, runtime: Any) -> bool:
        return self.gate.run(self.ref(runtime)).aborted is not None

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        call = request.tool_call
        ref = self.ref(request.runtime)
        decision = await self.gate.check(ref, call["name"], call.get("args") or {}, call.get("id"))
        if not decision.proceed:
            await self.gate.refused(decision)
            return ToolMessage(
                content=block_message(decision), tool_call_id=call["id"], name=call["name"], status="error"
            )
        try:
            message = await handler(request)
        except Exception as exc:
            await self.gate.finished(decision, error=exc)
            raise
        if isinstance(message, ToolMessage) and message.status == "error":
            await self.gate.finished(decision, error=message.content)
        else:
            await self.gate.finished(
                decision,
                result=message.content if isinstance(message, ToolMessage) else message,
                warned=decision.action == "warn",
            )
        if decision.action == "warn":
            message = _with_note(message, warning_note(decision))
        return message

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        if self.aborted(runtime):
            return {"jump_to": "end"}
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        if self.end_runs:
            await self.gate.end(self.ref(runtime))
        return None
