"""Five scripted agents, run under each instrumentation family's real package; their spans and native events.

Each agent is a script of tool calls (tool, arguments, result text). The same
script drives the framework's own scripted model (LangChain's fake chat model,
OpenAI Agents' ``ScriptedModel``, PydanticAI's ``FunctionModel``) with the real
instrumentation installed on an in-memory OpenTelemetry SDK, and is also written
as the native events a runner would send. The spans are encoded as the OTLP
exporters encode them, the record the Collector's Kafka exporter writes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from tests.otel.otel_helpers import Recorder, export_request


class Step(msgspec.Struct, frozen=True):
    tool: str
    args: dict
    result: str


def _stuck() -> list[Step]:  # the 21st identical call is blocked (20 identical outcomes)
    return [Step("lookup", {"q": "job 42"}, "status: pending")] * 21


def _ping_pong() -> list[Step]:
    a, b = Step("read_file", {"path": "a.txt"}, "A"), Step("list_dir", {"path": "."}, "a.txt")
    return [a if i % 2 == 0 else b for i in range(21)]


def _mixed() -> list[Step]:  # a two-argument tool alternating with a one-argument tool: ping-pong
    a, b = Step("search", {"q": "timeout", "limit": 5}, "2 hits"), Step("read_file", {"path": "a.txt"}, "A")
    return [a if i % 2 == 0 else b for i in range(21)]


def _poll() -> list[Step]:  # a known poll tool whose result changes: progress, no verdict
    return [Step("command_status", {"id": "job-1"}, f"running: {10 * i}%") for i in range(12)]


def _healthy() -> list[Step]:
    return [Step("lookup", {"q": f"item {i}"}, f"found item {i}") for i in range(8)]


AGENTS = {"stuck": _stuck(), "ping_pong": _ping_pong(), "mixed": _mixed(), "poll": _poll(), "healthy": _healthy()}


def native_events(script: list[Step], agent: str = "native", origin: str | None = None) -> list[str]:
    """The events a runner sends for the script (calls, results, run end), as JSONL lines; ``origin``:
    marked as from elsewhere (``"otel"``: decided in shadow, as the spans' runs are)."""
    out = []
    mark = {} if origin is None else {"origin": origin}
    for i, step in enumerate(script):
        base = {"agent_id": agent, "run_id": "r", "tool_name": step.tool, "tool_call_id": f"call_{i}", **mark}
        out.append({"type": "tool_call", **base, "params": step.args})
        out.append({"type": "tool_result", **base, "params": step.args, "result": step.result})
    out.append({"type": "run_end", "agent_id": agent, "run_id": "r", **mark})
    return [json.dumps(e) for e in out]


class Results:
    """The tools' results in script order (the tools run one at a time, in the order called)."""

    def __init__(self, script: list[Step]) -> None:
        self.results = [s.result for s in script]
        self.n = 0

    def next(self) -> str:
        i, self.n = self.n, self.n + 1
        return self.results[i]


def functions(results: Results) -> list:
    """The agents' tools as a user writes them: four of one argument, one of two."""

    def lookup(q: str) -> str:
        """Look something up."""
        return results.next()

    def read_file(path: str) -> str:
        """Read a file."""
        return results.next()

    def list_dir(path: str) -> str:
        """List a directory."""
        return results.next()

    def command_status(id: str) -> str:  # noqa: A002 - the argument's name is part of what is hashed
        """Status of a background command."""
        return results.next()

    def search(q: str, limit: int) -> str:
        """Search the documents."""
        return results.next()

    return [lookup, read_file, list_dir, command_status, search]


def _langchain_spans(instrumentor: Any, scripts: dict[str, list[Step]]) -> dict[str, list]:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    class ScriptedChat(GenericFakeChatModel):
        def bind_tools(self, tools, **kwargs):
            return self

    rec = Recorder("langchain-fleet")
    instrumentor.instrument(tracer_provider=rec.provider)
    out = {}
    try:
        for name, script in scripts.items():
            results = Results(script)

            calls = [
                AIMessage(content="", tool_calls=[{"name": s.tool, "args": s.args, "id": f"call_{i}"}])
                for i, s in enumerate(script)
            ]
            model = ScriptedChat(messages=iter([*calls, AIMessage(content="done")]))
            agent = create_agent(model, [tool(f) for f in functions(results)])
            agent.invoke(
                {"messages": [("user", "go")]},
                {"configurable": {"thread_id": f"thread-{name}"}, "recursion_limit": 200},
            )
            out[name] = rec.take()
    finally:
        instrumentor.uninstrument()
    return out


def openinference_langchain(scripts: dict[str, list[Step]]) -> dict[str, list]:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    return _langchain_spans(LangChainInstrumentor(), scripts)


def openllmetry_langchain(scripts: dict[str, list[Step]]) -> dict[str, list]:
    """In this process: its uninstrument() leaves a callback handler behind that keeps opening spans, so a
    later LangChain run's spans nest under them. Tests call :func:`encoded_in_subprocess` instead."""
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    return _langchain_spans(LangchainInstrumentor(), scripts)


def encoded_in_subprocess(capture: str, agents: list[str]) -> dict[str, bytes]:
    """A capture run in a fresh interpreter (``capture``: a function of this module), each agent's spans
    as ``otlp_proto`` bytes."""
    root = Path(__file__).resolve().parents[2]
    code = "import sys; from tests.otel.otel_families import _print; _print(sys.argv[1], sys.argv[2:])"
    out = subprocess.run(
        [sys.executable, "-c", code, capture, *agents], cwd=root, capture_output=True, check=True, timeout=300
    )
    return {k: base64.b64decode(v) for k, v in json.loads(out.stdout.splitlines()[-1]).items()}


def _print(capture: str, agents: list[str]) -> None:
    spans = globals()[capture]({name: AGENTS[name] for name in agents})
    print(json.dumps({k: base64.b64encode(encoded(v)).decode() for k, v in spans.items()}))


def openinference_openai_agents(scripts: dict[str, list[Step]]) -> dict[str, list]:
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    rec = Recorder("openai-agents-fleet")
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=rec.provider)
    out = {}
    try:
        for name, script in scripts.items():
            results = Results(script)

            tools = [function_tool(f) for f in functions(results)]
            model = ScriptedModel(
                [[function_call(s.tool, s.args, call_id=f"call_{i}")] for i, s in enumerate(script)]
                + [[assistant_message("done")]]
            )
            bot = Agent(name=f"oa-{name}", tools=tools, model=model)
            asyncio.run(Runner.run(bot, "go", max_turns=100, run_config=RunConfig(group_id=f"thread-{name}")))
            out[name] = rec.take()
    finally:
        instrumentor.uninstrument()
    return out


def pydantic_ai_own(scripts: dict[str, list[Step]]) -> dict[str, list]:
    from pydantic_ai import Agent, InstrumentationSettings
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.tools import Tool

    rec = Recorder("pydantic-ai-fleet")
    out = {}
    for name, script in scripts.items():
        results = Results(script)
        asked = []

        def respond(messages, info, script=script, asked=asked):
            i = len(asked)
            asked.append(i)
            if i < len(script):
                return ModelResponse(parts=[ToolCallPart(script[i].tool, script[i].args, tool_call_id=f"call_{i}")])
            return ModelResponse(parts=[TextPart("done")])

        agent = Agent(FunctionModel(respond), name=f"pa-{name}", tools=[Tool(f) for f in functions(results)])
        agent.instrument = InstrumentationSettings(tracer_provider=rec.provider, include_content=True)
        agent.run_sync("go", conversation_id=f"thread-{name}")
        out[name] = rec.take()
    return out


def encoded(spans: list) -> bytes:
    """SDK spans as the ``otlp_proto`` record the Collector's Kafka exporter writes."""
    return export_request(spans).SerializeToString()


def openclaw_attribute_set(scripts: dict[str, list[Step]], capture_content: bool) -> dict[str, list]:
    """Spans under OpenClaw's documented diagnostics-otel attribute set (hand-written: the exporter is an
    external plugin, not in the installed package). Per run an ``openclaw.run`` span, per tool call an
    ``openclaw.tool.execution`` span: ``gen_ai.tool.name``, ``gen_ai.operation.name = execute_tool``,
    ``gen_ai.tool.call.id``, ``openclaw.toolName``, ``openclaw.tool.source``; the arguments and result
    (``gen_ai.tool.call.arguments`` / ``.result``, copies of ``openclaw.content.tool_input`` / ``_output``)
    only with ``diagnostics.otel.captureContent`` (``toolInputs`` / ``toolOutputs``)."""
    rec = Recorder("openclaw-gateway")
    tracer = rec.provider.get_tracer("openclaw")
    out = {}
    for name, script in scripts.items():
        with tracer.start_as_current_span("openclaw.run") as run:
            run.set_attributes({"openclaw.outcome": "completed", "openclaw.provider": "scripted"})
            for i, step in enumerate(script):
                with tracer.start_as_current_span("openclaw.tool.execution") as span:
                    attributes = {
                        "gen_ai.tool.name": step.tool,
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.call.id": f"call_{i}",
                        "openclaw.toolName": step.tool,
                        "openclaw.tool.source": "builtin",
                    }
                    if capture_content:
                        attributes["openclaw.content.tool_input"] = json.dumps(step.args)
                        attributes["gen_ai.tool.call.arguments"] = json.dumps(step.args)
                        attributes["openclaw.content.tool_output"] = step.result
                        attributes["gen_ai.tool.call.result"] = step.result
                    span.set_attributes(attributes)
        out[name] = rec.take()
    return out


@cache
def _global_recorder() -> Recorder:
    """Google ADK traces through the global tracer provider, which can be set once per process."""
    from opentelemetry import trace

    rec = Recorder("adk-fleet")
    trace.set_tracer_provider(rec.provider)
    return rec


def google_adk_own(scripts: dict[str, list[Step]]) -> dict[str, list]:
    """Google ADK's own spans, content captured as its docs say (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
    =SPAN_ONLY``; ADK 2 puts ``gen_ai.tool.call.arguments`` / ``.result`` on its tool spans only then)."""
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    rec = _global_recorder()
    rec.take()
    out = {}
    saved = os.environ.get(ADK_CONTENT)
    os.environ[ADK_CONTENT] = "SPAN_ONLY"
    try:
        for name, script in scripts.items():
            results = Results(script)

            class Scripted(BaseLlm):
                n: int = 0

                async def generate_content_async(self, llm_request, stream=False, script=script):
                    i, self.n = self.n, self.n + 1
                    if i < len(script):
                        call = types.FunctionCall(name=script[i].tool, args=script[i].args, id=f"call_{i}")
                        part = types.Part(function_call=call)
                    else:
                        part = types.Part(text="done")
                    yield LlmResponse(content=types.Content(role="model", parts=[part]))

            agent = LlmAgent(name=f"adk_{name}", model=Scripted(model="scripted"), tools=functions(results))
            runner = InMemoryRunner(agent=agent, app_name="fleet")

            async def run(runner=runner) -> None:
                session = await runner.session_service.create_session(app_name="fleet", user_id="u")
                message = types.Content(role="user", parts=[types.Part(text="go")])
                async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
                    pass

            asyncio.run(run())
            out[name] = rec.take()
    finally:
        if saved is None:
            os.environ.pop(ADK_CONTENT, None)
        else:
            os.environ[ADK_CONTENT] = saved
    return out


ADK_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
