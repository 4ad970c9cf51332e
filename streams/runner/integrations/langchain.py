"""loopwarden for LangChain v1 agents and LangGraph graphs (``pip install -e '.[langchain]'`` in the clone).

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

Under the ``openclaw-latest`` profile (a client deciding locally) the
model's tool calls are admitted together in ``after_model``, before any of
them runs (the OpenClaw release's bounded recovery: the run's first
critical refuses the whole batch, the second aborts the run; the warning is
the release's system note).

In a hand-built LangGraph graph use the same gate on the tool node:
``ToolNode(tools, awrap_tool_call=LoopwardenMiddleware(client).awrap_tool_call)``
and ask ``middleware.aborted()`` in the model node (the node's own runtime
tells it the run; passing the node's ``config`` or ``runtime`` works too).

How the caller learns that a run was aborted: ``middleware.aborted(config)``
is True after the invocation (and the client's ``run.aborted`` holds the
verdict). An abort decided on a call answers that call's ``ToolMessage``
with the abort message (``status="error"``); one decided on a result (the
post-compaction guard, decided locally) ends the agent before its next
model call (``create_agent``).
A compaction retry is reported with ``await middleware.compaction_retry(runtime_or_config)``.

Run identity: ``agent_id`` is the constructor's; ``session_id`` is the
LangGraph thread id (``config["configurable"]["thread_id"]``); ``run_id``
is the invocation's run id (``config["run_id"]``, as LangGraph's
``execution_info.run_id`` reports it); a ``create_agent`` invocation
without one gets an id of its own (kept in the agent state, key
``loopwarden_run_id``), so invocations never pool into one run. Pass
``resolve=`` (a function of the LangGraph runtime or tool runtime returning
a :class:`~loopwarden.runner.wire.RunRef`) to map them differently. The run
ends (``run_end``) when the agent finishes (``after_agent``) unless
``end_runs=False``. Async only (``ainvoke``/``astream``): the client is
asyncio. With a client that decides locally (``LoopClient(config=...)``) no
call waits for the broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain_core.messages import ToolMessage

from loopwarden.runner.integrations._gate import Gate, block_message, warning_note
from loopwarden.runner.wire import RunRef

Resolve = Callable[[Any], RunRef]
RUN_KEY = "loopwarden_run_id"


class LoopwardenState(AgentState):
    """The agent state plus the run id loopwarden gave an invocation that came without one."""

    loopwarden_run_id: NotRequired[str | None]


def _current_runtime() -> Any:
    """The LangGraph runtime of the node being executed (None outside a graph)."""
    try:
        from langgraph.runtime import get_runtime

        return get_runtime()
    except (RuntimeError, KeyError, ImportError):
        return None


def thread_and_run(runtime: Any = None) -> tuple[str | None, str | None]:
    """(thread id, run id) of the current LangGraph execution, if it has them.

    ``runtime`` is a Runtime, a ToolRuntime, a node's config or None; what it
    lacks is read from the runtime of the node being executed (a node's
    config has no run id: only its runtime does)."""
    info = getattr(runtime, "execution_info", None)
    if info is None:
        info = getattr(_current_runtime(), "execution_info", None)
    thread = getattr(info, "thread_id", None)
    run = getattr(info, "run_id", None)
    config = runtime if isinstance(runtime, dict) else getattr(runtime, "config", None)
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

    state_schema = LoopwardenState

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

    def ref(self, runtime: Any = None, state: Any = None) -> RunRef:
        if self._resolve is not None:
            return self._resolve(runtime)
        thread, run = thread_and_run(runtime)
        if run is None and isinstance(state, dict):
            run = state.get(RUN_KEY)
        return RunRef(agent_id=self.agent_id, session_id=thread, run_id=run)

    def aborted(self, runtime: Any = None, state: Any = None) -> bool:
        """Whether the run was aborted; in a node, with no argument, the node's own run."""
        ref = self.ref(runtime, state)
        return (self.gate.aborted(ref) or self.gate.run(ref).aborted) is not None

    async def compaction_retry(self, runtime: Any = None, reason: str | None = None, state: Any = None) -> None:
        """Report that the run compacted its context and retries (arms the post-compaction guard)."""
        await self.gate.compaction_retry(self.ref(runtime, state), reason)

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """An invocation without a run id gets one of its own (in the state): runs never pool."""
        if self._resolve is None and thread_and_run(runtime)[1] is None:
            return {RUN_KEY: f"run_{uuid.uuid4().hex}"}
        return None

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        call = request.tool_call
        ref = self.ref(request.runtime, getattr(request, "state", None))
        decision = await self.gate.decide(ref, call["name"], call.get("args") or {}, call.get("id"))
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

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """The model's tool calls, admitted together before any runs (bounded recovery, openclaw-latest)."""
        messages = state.get("messages") if isinstance(state, dict) else None
        calls = getattr(messages[-1], "tool_calls", None) if messages else None
        if calls:
            batch = [(c["name"], c.get("args") or {}, c.get("id")) for c in calls]
            await self.gate.admit(self.ref(runtime, state), batch)
        return None

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        if self.aborted(runtime, state):
            return {"jump_to": "end"}
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        if self.end_runs:
            await self.gate.end(self.ref(runtime, state))
        return None
