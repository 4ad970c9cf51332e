"""loopwarden for the OpenAI Agents SDK (``pip install -e '.[openai-agents]'`` in the clone).

One call attaches a tool input guardrail and a tool output guardrail to
every function tool of an agent; :meth:`LoopwardenGuardrails.run` runs the
agent as ``Runner.run`` does, with the run config that reports tool
exceptions, a run id of its own and a ``run_end`` when it returns or
raises::

    lw = guard_agent(agent, client)                 # agent.tools now gated
    result = await lw.run(agent, "...", run_config=RunConfig(group_id=thread), max_turns=30)

(``Runner.run(agent, ..., run_config=lw.run_config(...))`` works too, but
then the runner ends each run itself with :meth:`LoopwardenGuardrails.end`;
without a ``run_end``, and with tracing off, one conversation is one run
that never ends.) With a client that decides locally (``LoopClient(config=...)``)
no call waits for the broker.

- ``allow``: the tool runs; the output guardrail publishes its output;
- ``warn``: the tool runs; the output guardrail hands the model the output
  with the warning appended (``reject_content`` with ``str(output) + note``:
  the SDK's only way to change a result) and acknowledges it;
- ``block``: the input guardrail answers ``reject_content`` with the block
  message: the tool does not run and the model gets the message as that
  call's output (the SDK's own call id);
- ``abort``: the input guardrail answers ``raise_exception``: the run ends
  with ``ToolInputGuardrailTripwireTriggered`` (its ``output.output_info`` is
  the :class:`~loopwarden.runner.state.Decision`).

Under the ``openclaw-latest`` profile (a client deciding locally) :meth:`LoopwardenGuardrails.run`
admits each model response's tool calls together (run hooks' ``on_llm_end``,
before any tool runs: the OpenClaw release's bounded recovery; your own
``hooks=`` still run); the warning is the release's system note.

A tool that raises is published as that call's ``error`` (the real exception,
through ``RunConfig.tool_error_formatter``, which this wraps: a formatter
you set still decides the message the model sees).

How the caller learns that a run was aborted: ``lw.run`` (or
``Runner.run``) raises ``ToolInputGuardrailTripwireTriggered``; its
``guardrail_result.output.output_info`` is the abort
:class:`~loopwarden.runner.state.Decision`. An abort decided on a tool's
result (the post-compaction guard) answers the run's next call the same way.

Run identity: ``agent_id`` is the constructor's, else the agent's ``name``;
``session_id`` is ``RunConfig.group_id`` (a conversation or thread);
``run_id`` is the run's trace id (each ``Runner.run`` has its own); with
tracing disabled, ``RunConfig.trace_id`` if you set one, else the id
:meth:`LoopwardenGuardrails.run` gave the run, else an id of the run's own
context (the ``Usage`` object every tool context of one ``Runner.run`` shares),
so runs of one conversation never pool.
Pending decisions and tool errors are kept per run and call id, so two
concurrent runs that number their call ids alike never mix. A tool shared
by several guarded agents is gated once (the first guardrails attached to
it; the calling agent's name still names the run). Pass ``resolve=`` (a
function of the guardrail's ``ToolContext`` returning a
:class:`~loopwarden.runner.wire.RunRef`) to map them differently.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from agents import Agent, FunctionTool, RunConfig, RunHooks, Runner
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)
from agents.tracing import get_current_trace

from loopwarden.runner.integrations._gate import Gate, block_message, warning_note
from loopwarden.runner.wire import RunRef

Resolve = Callable[[Any], RunRef]
GUARDRAIL_NAME = "loopwarden"


class _Scope:
    """One :meth:`LoopwardenGuardrails.run`: its run id and the runs it touched (ended at its end)."""

    __slots__ = ("run_id", "refs", "config", "agent")

    def __init__(self, config: RunConfig, agent: Any) -> None:
        self.run_id = f"run_{uuid.uuid4().hex}"
        self.refs: dict[str, RunRef] = {}
        self.config = config
        self.agent = agent


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("loopwarden_openai_run", default=None)


class _RunIds:
    """A run id per ``Runner.run`` without a trace: keyed by the object the SDK makes once per run and
    shares with every tool context of it (its ``Usage``), held weakly so an id never outlives its run."""

    MAX = 4096  # live runs remembered at once (the oldest is forgotten beyond)

    def __init__(self) -> None:
        self._ids: dict[int, str] = {}

    def id_of(self, run_object: Any) -> str | None:
        if run_object is None:
            return None
        key = id(run_object)
        run_id = self._ids.get(key)
        if run_id is None:
            try:
                weakref.finalize(run_object, self._ids.pop, key, None)
            except TypeError:  # not weakly referable: no id that could be reused by another run
                return None
            if len(self._ids) >= self.MAX:
                self._ids.pop(next(iter(self._ids)))
            run_id = self._ids[key] = f"run_{uuid.uuid4().hex}"
        return run_id


def _params(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


class _AdmitHooks(RunHooks):
    """Run hooks that admit each model response's tool calls together (then any hooks of the caller's)."""

    def __init__(self, guard: LoopwardenGuardrails, inner: Any = None) -> None:
        self._guard = guard
        self._inner = inner

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        if self._inner is not None:
            await self._inner.on_llm_end(context, agent, response)
        await self._guard.admit(context, agent, response)


def _delegate(name: str) -> Any:
    async def hook(self: _AdmitHooks, *args: Any, **kwargs: Any) -> None:
        if self._inner is not None:
            await getattr(self._inner, name)(*args, **kwargs)

    hook.__name__ = name
    return hook


for _name in ("on_llm_start", "on_agent_start", "on_agent_end", "on_handoff", "on_tool_start", "on_tool_end"):
    setattr(_AdmitHooks, _name, _delegate(_name))


class LoopwardenGuardrails:
    """The guardrails and error formatter of one client; :func:`guard_agent` attaches them."""

    def __init__(
        self, client: Any, agent_id: str | None = None, *, resolve: Resolve | None = None, timeout: float | None = None
    ) -> None:
        self.gate = Gate(client, timeout=timeout)
        self.agent_id = agent_id
        self._resolve = resolve
        self._errors: dict[tuple[str, str], BaseException] = {}  # (run key, call id) -> the tool's exception
        self._runs = _RunIds()
        self.input_guardrail = ToolInputGuardrail(guardrail_function=self._before, name=GUARDRAIL_NAME)
        self.output_guardrail = ToolOutputGuardrail(guardrail_function=self._after, name=GUARDRAIL_NAME)

    def ref(self, ctx: Any, agent: Any = None) -> RunRef:
        scope = _SCOPE.get()
        if self._resolve is not None:
            ref = self._resolve(ctx)
        else:
            config = getattr(ctx, "run_config", None) or (scope.config if scope is not None else None)
            agent = agent or getattr(ctx, "agent", None) or (scope.agent if scope is not None else None)
            trace = get_current_trace()
            run_id = trace.trace_id if trace is not None and trace.trace_id != "no-op" else None
            run_id = run_id or getattr(config, "trace_id", None) or (scope.run_id if scope is not None else None)
            run_id = run_id or self._runs.id_of(getattr(ctx, "usage", None))
            name = self.agent_id or getattr(agent, "name", None) or "openai-agents"
            ref = RunRef(agent_id=name, session_id=getattr(config, "group_id", None), run_id=run_id)
        if scope is not None and len(scope.refs) < 64:
            scope.refs.setdefault(f"{ref.agent_id}\0{ref.key}", ref)
        return ref

    def attach(self, agent: Agent) -> Agent:
        """Gate every function tool of ``agent`` (idempotent); a tool another guard already gates is left
        to it, so a tool shared by two guarded agents is gated once per call."""
        for tool in agent.tools:
            if not isinstance(tool, FunctionTool):
                continue
            inputs = tool.tool_input_guardrails = list(tool.tool_input_guardrails or [])
            outputs = tool.tool_output_guardrails = list(tool.tool_output_guardrails or [])
            if any(getattr(g, "name", None) == GUARDRAIL_NAME for g in inputs):
                continue
            inputs.insert(0, self.input_guardrail)  # first: a refused call runs no other guardrail
            outputs.append(self.output_guardrail)
        return agent

    async def run(self, agent: Agent, input: Any, *, run_config: RunConfig | None = None, **kwargs: Any) -> Any:
        """``Runner.run`` with this guard's run config, a run id of its own (used when there is no trace
        id) and ``run_end`` for the run when it returns or raises (an abort acknowledged with it)."""
        config = self.run_config(run_config)
        scope = _Scope(config, agent)
        token = _SCOPE.set(scope)
        kwargs["hooks"] = _AdmitHooks(self, kwargs.get("hooks"))
        try:
            return await Runner.run(agent, input, run_config=config, **kwargs)
        finally:
            _SCOPE.reset(token)
            for ref in scope.refs.values():
                await self.gate.end(ref)

    def run_config(self, base: RunConfig | None = None) -> RunConfig:
        """``base`` (or a new RunConfig) whose ``tool_error_formatter`` also records the exception."""
        base = base or RunConfig()
        inner = base.tool_error_formatter

        async def formatter(args: Any) -> str | None:
            if args.kind == "tool_exception" and args.error is not None:
                self._errors[(self.ref(args.run_context).key, args.call_id)] = args.error
                if len(self._errors) > 4096:
                    self._errors.pop(next(iter(self._errors)))
            if inner is None:
                return None
            out = inner(args)
            return await out if hasattr(out, "__await__") else out

        return dataclasses.replace(base, tool_error_formatter=formatter)

    async def admit(self, context: Any, agent: Any, response: Any) -> None:
        """A model response's function calls, admitted together before any runs (the openclaw-latest
        profile's bounded recovery; nothing happens otherwise): each guardrail then takes its call's decision."""
        calls = [
            (item.name, _params(item.arguments), item.call_id)
            for item in getattr(response, "output", None) or ()
            if getattr(item, "type", None) == "function_call"
        ]
        if calls:
            await self.gate.admit(self.ref(context, agent), calls)

    async def _before(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        ref = self.ref(ctx, data.agent)
        decision = await self.gate.decide(ref, ctx.tool_name, _params(ctx.tool_arguments), ctx.tool_call_id)
        if decision.proceed:
            self.gate.hold(ref.key, ctx.tool_call_id, decision)
            return ToolGuardrailFunctionOutput.allow(output_info=decision)
        await self.gate.refused(decision)
        if decision.action == "abort":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=decision)
        return ToolGuardrailFunctionOutput.reject_content(block_message(decision), output_info=decision)

    async def _after(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        call_id = data.context.tool_call_id
        key = self.ref(data.context, data.agent).key
        decision = self.gate.take(key, call_id)
        error = self._errors.pop((key, call_id), None)
        if decision is None:  # not gated by us (a guardrail list edited by hand): nothing to report
            return ToolGuardrailFunctionOutput.allow()
        if error is not None:
            await self.gate.finished(decision, error=error)
            return ToolGuardrailFunctionOutput.allow(output_info=decision)
        warned = decision.action == "warn"
        await self.gate.finished(decision, result=data.output, warned=warned)
        if warned:
            return ToolGuardrailFunctionOutput.reject_content(
                f"{data.output}{warning_note(decision)}", output_info=decision
            )
        return ToolGuardrailFunctionOutput.allow(output_info=decision)

    async def compaction_retry(self, where: Any = None, reason: str | None = None) -> None:
        """Report that a run compacted its context and retries (arms the post-compaction guard).

        ``where``: a :class:`RunRef`; or a ``ToolContext``/``RunContextWrapper`` of the run (e.g. in a
        hook); or nothing, inside :meth:`run` (the current run)."""
        ref = where if isinstance(where, RunRef) else self.ref(where)
        await self.gate.compaction_retry(ref, reason)

    async def end(self, ref: RunRef) -> None:
        await self.gate.end(ref)


def guard_agent(agent: Agent, client: Any, agent_id: str | None = None, **options: Any) -> LoopwardenGuardrails:
    """Gate every function tool of ``agent`` with loopwarden; returns the guardrails (for ``run_config``)."""
    guard = LoopwardenGuardrails(client, agent_id, **options)
    guard.attach(agent)
    return guard
