"""loopwarden for the OpenAI Agents SDK (``pip install 'loopwarden[openai-agents]'``).

One call attaches a tool input guardrail and a tool output guardrail to
every function tool of an agent, and gives the run config that reports
tool exceptions::

    lw = guard_agent(agent, client)                 # agent.tools now gated
    result = await Runner.run(agent, "...", run_config=lw.run_config(RunConfig(group_id=thread)))

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

A tool that raises is published as that call's ``error`` (the real exception,
through ``RunConfig.tool_error_formatter``, which this wraps: a formatter
you set still decides the message the model sees).

Run identity: ``agent_id`` is the constructor's, else the agent's ``name``;
``session_id`` is ``RunConfig.group_id`` (a conversation or thread);
``run_id`` is the run's trace id (each ``Runner.run`` has its own; with
tracing disabled, ``RunConfig.trace_id`` if you set one, else the run is the
session). Pass ``resolve=`` (a function of the guardrail's ``ToolContext``
returning a :class:`~loopwarden.runner.wire.RunRef`) to map them differently.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from agents import Agent, FunctionTool, RunConfig
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


def _params(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


class LoopwardenGuardrails:
    """The guardrails and error formatter of one client; :func:`guard_agent` attaches them."""

    def __init__(
        self, client: Any, agent_id: str | None = None, *, resolve: Resolve | None = None, timeout: float | None = None
    ) -> None:
        self.gate = Gate(client, timeout=timeout)
        self.agent_id = agent_id
        self._resolve = resolve
        self._errors: dict[str, BaseException] = {}
        self.input_guardrail = ToolInputGuardrail(guardrail_function=self._before, name="loopwarden")
        self.output_guardrail = ToolOutputGuardrail(guardrail_function=self._after, name="loopwarden")

    def ref(self, ctx: Any, agent: Any = None) -> RunRef:
        if self._resolve is not None:
            return self._resolve(ctx)
        config = getattr(ctx, "run_config", None)
        trace = get_current_trace()
        run_id = trace.trace_id if trace is not None and trace.trace_id != "no-op" else None
        run_id = run_id or getattr(config, "trace_id", None)
        name = self.agent_id or getattr(agent, "name", None) or "openai-agents"
        return RunRef(agent_id=name, session_id=getattr(config, "group_id", None), run_id=run_id)

    def attach(self, agent: Agent) -> Agent:
        """Gate every function tool of ``agent`` (idempotent)."""
        for tool in agent.tools:
            if not isinstance(tool, FunctionTool):
                continue
            inputs = tool.tool_input_guardrails = list(tool.tool_input_guardrails or [])
            outputs = tool.tool_output_guardrails = list(tool.tool_output_guardrails or [])
            if self.input_guardrail not in inputs:
                inputs.insert(0, self.input_guardrail)  # first: a refused call runs no other guardrail
            if self.output_guardrail not in outputs:
                outputs.append(self.output_guardrail)
        return agent

    def run_config(self, base: RunConfig | None = None) -> RunConfig:
        """``base`` (or a new RunConfig) whose ``tool_error_formatter`` also records the exception."""
        base = base or RunConfig()
        inner = base.tool_error_formatter

        async def formatter(args: Any) -> str | None:
            if args.kind == "tool_exception" and args.error is not None:
                self._errors[args.call_id] = args.error
                if len(self._errors) > 4096:
                    self._errors.pop(next(iter(self._errors)))
            if inner is None:
                return None
            out = inner(args)
            return await out if hasattr(out, "__await__") else out

        return dataclasses.replace(base, tool_error_formatter=formatter)

    async def _before(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        ref = self.ref(ctx, data.agent)
        decision = await self.gate.check(ref, ctx.tool_name, _params(ctx.tool_arguments), ctx.tool_call_id)
        if decision.proceed:
            self.gate.hold(ctx.tool_call_id, decision)
            return ToolGuardrailFunctionOutput.allow(output_info=decision)
        await self.gate.refused(decision)
        if decision.action == "abort":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=decision)
        return ToolGuardrailFunctionOutput.reject_content(block_message(decision), output_info=decision)

    async def _after(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        call_id = data.context.tool_call_id
        decision = self.gate.take(call_id)
        error = self._errors.pop(call_id, None)
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

    async def compaction_retry(self, ref: RunRef, reason: str | None = None) -> None:
        await self.gate.compaction_retry(ref, reason)

    async def end(self, ref: RunRef) -> None:
        await self.gate.end(ref)


def guard_agent(agent: Agent, client: Any, agent_id: str | None = None, **options: Any) -> LoopwardenGuardrails:
    """Gate every function tool of ``agent`` with loopwarden; returns the guardrails (for ``run_config``)."""
    guard = LoopwardenGuardrails(client, agent_id, **options)
    guard.attach(agent)
    return guard
