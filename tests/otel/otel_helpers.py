"""Real OpenTelemetry spans for the span-path tests: an instrumented PydanticAI agent, OTLP encodings.

The agent is PydanticAI with its ``FunctionModel`` (no network), instrumented
with the OpenTelemetry SDK (``agent.instrument = InstrumentationSettings(...)``);
its finished spans are encoded by the OTLP exporters' own encoder
(``opentelemetry.exporter.otlp.proto.common``) into the ``ExportTraceServiceRequest``
the Collector's Kafka exporter writes (``otlp_proto``), or its OTLP JSON form
(``otlp_json``: hex ids, camelCase keys).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data" / "otel"
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def export_request(spans: list) -> Any:
    """SDK spans -> ``ExportTraceServiceRequest``, as the OTLP exporters build it."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(spans)


def _hex_ids(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {
            k: (base64.b64decode(v).hex() if k in _ID_KEYS and isinstance(v, str) else _hex_ids(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_hex_ids(v) for v in obj]
    return obj


def _b64_ids(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {
            k: (base64.b64encode(bytes.fromhex(v)).decode() if k in _ID_KEYS and isinstance(v, str) else _b64_ids(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list):
        return [_b64_ids(v) for v in obj]
    return obj


def to_otlp_json(request: Any) -> dict:
    """A request in OTLP/JSON: protobuf's JSON mapping with trace and span ids in hex (the OTLP rule)."""
    from google.protobuf.json_format import MessageToDict

    return _hex_ids(MessageToDict(request))


def to_proto_bytes(otlp_json: dict) -> bytes:
    """OTLP/JSON -> the same request as ``otlp_proto`` bytes."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return ParseDict(_b64_ids(otlp_json), ExportTraceServiceRequest()).SerializeToString()


def fixture(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def encoded(otlp_json: dict, encoding: str) -> bytes:
    return json.dumps(otlp_json).encode() if encoding == "otlp_json" else to_proto_bytes(otlp_json)


class Recorder:
    """A tracer provider whose finished spans stay in memory (SimpleSpanProcessor: one by one, in end order)."""

    def __init__(self, service: str = "otel-test") -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def take(self) -> list:
        spans = list(self.exporter.get_finished_spans())
        self.exporter.clear()
        return spans


def looping_agent(recorder: Recorder, calls: int, args: dict, result: str = "status: pending", name: str = "poller"):
    """A PydanticAI agent whose model asks for the same tool call ``calls`` times, then answers."""
    from pydantic_ai import Agent, InstrumentationSettings
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    asked: list = []

    def respond(messages, info):
        asked.append(messages)
        i = len(asked) - 1
        if i < calls:
            return ModelResponse(parts=[ToolCallPart("lookup", args, tool_call_id=f"call_{i}")])
        return ModelResponse(parts=[TextPart("giving up")])

    agent = Agent(FunctionModel(respond), name=name)
    agent.instrument = InstrumentationSettings(tracer_provider=recorder.provider, include_content=True)

    @agent.tool_plain
    def lookup(q: str) -> str:
        """Look something up."""
        return result

    return agent


# -- the recorded fixtures of tests/data/otel/ (regenerate: python -m tests.otel.otel_helpers) ---------


def _write(name: str, spans: list) -> None:
    DATA.mkdir(parents=True, exist_ok=True)
    (DATA / name).write_text(json.dumps(to_otlp_json(export_request(spans)), indent=1) + "\n")


def _record_pydantic_ai() -> None:
    from pydantic_ai import Agent, InstrumentationSettings, ModelRetry
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    rec = Recorder("pydantic-ai-fleet")
    looping_agent(rec, 3, {"q": "job 42"}).run_sync("poll the job", conversation_id="conv-pa-1")
    _write("pydantic_ai.otlp.json", rec.take())

    def respond(messages, info):
        if len(messages) < 3:
            return ModelResponse(parts=[ToolCallPart("fetch", {"url": "https://example.invalid"}, tool_call_id="f1")])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(respond), name="fetcher", retries=3)
    agent.instrument = InstrumentationSettings(tracer_provider=rec.provider, include_content=True)

    @agent.tool_plain
    def fetch(url: str) -> str:
        """Fetch a page."""
        raise ModelRetry("connection refused")

    agent.run_sync("fetch it", conversation_id="conv-pa-2")
    _write("pydantic_ai_error.otlp.json", rec.take())


def _record_by_hand() -> None:
    """OpenInference and OpenLLMetry spans, made with the SDK under those conventions' attribute names
    (their instrumentations are not installed here)."""
    from opentelemetry.trace import Status, StatusCode

    rec = Recorder("openai-agents-fleet")
    tracer = rec.provider.get_tracer("openinference.instrumentation.openai_agents")
    with tracer.start_as_current_span("Support agent") as agent:
        agent.set_attributes({"openinference.span.kind": "AGENT", "agent.name": "support", "session.id": "sess-oi-1"})
        for i in range(3):
            with tracer.start_as_current_span("get_ticket") as span:
                span.set_attributes(
                    {
                        "openinference.span.kind": "TOOL",
                        "tool.name": "get_ticket",
                        "tool.id": f"call_oi_{i}",
                        "input.value": '{"ticket": 7}',
                        "input.mime_type": "application/json",
                        "output.value": '{"status": "open"}',
                        "output.mime_type": "application/json",
                        "agent.name": "support",
                        "session.id": "sess-oi-1",
                    }
                )
        with tracer.start_as_current_span("close_ticket") as span:
            span.set_attributes(
                {
                    "openinference.span.kind": "TOOL",
                    "tool.name": "close_ticket",
                    "input.value": '{"ticket": 7}',
                    "agent.name": "support",
                    "session.id": "sess-oi-1",
                }
            )
            span.record_exception(PermissionError("ticket 7 is locked"))
            span.set_status(Status(StatusCode.ERROR, "ticket 7 is locked"))
    _write("openinference.otlp.json", rec.take())

    rec = Recorder("langchain-fleet")
    tracer = rec.provider.get_tracer("traceloop.sdk")
    with tracer.start_as_current_span("research.workflow") as wf:
        wf.set_attributes(
            {
                "traceloop.span.kind": "workflow",
                "traceloop.entity.name": "research",
                "traceloop.workflow.name": "research",
                "traceloop.association.properties.session_id": "sess-ol-1",
            }
        )
        for _ in range(2):
            with tracer.start_as_current_span("search.tool") as span:
                span.set_attributes(
                    {
                        "traceloop.span.kind": "tool",
                        "traceloop.entity.name": "search",
                        "traceloop.workflow.name": "research",
                        "traceloop.entity.input": '{"args": [], "kwargs": {"query": "loopwarden"}}',
                        "traceloop.entity.output": '"no results"',
                        "traceloop.association.properties.session_id": "sess-ol-1",
                    }
                )
    _write("openllmetry.otlp.json", rec.take())

    rec = Recorder("odd-fleet")
    tracer = rec.provider.get_tracer("hand")
    with tracer.start_as_current_span("execute_tool") as span:  # GenAI, but no tool name anywhere
        span.set_attributes({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.arguments": "{}"})
    with tracer.start_as_current_span("execute_tool lookup") as span:  # content capture off
        span.set_attributes({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"})
    with tracer.start_as_current_span("execute_tool x") as span:  # a name beyond any sense
        span.set_attributes(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "x" * 5000,
                "gen_ai.tool.call.arguments": "{}",
            }
        )
    with tracer.start_as_current_span("GET /health") as span:  # not a tool span: ignored
        span.set_attributes({"http.request.method": "GET"})
    _write("unmappable.otlp.json", rec.take())


if __name__ == "__main__":
    _record_pydantic_ai()
    _record_by_hand()
