"""Spans -> loopwarden events: the attribute mapping, pure (streams/otel/OTEL.md has the tables).

A tool span becomes a ``tool_call`` (at its start) and a ``tool_result`` (at
its end); an agent-run span ends its run (``run_end``). Each field is taken
from the first family that has it: the OpenTelemetry GenAI semantic
conventions, then OpenInference, then OpenLLMetry. Every event carries
``origin: "otel"``, so the worker decides these runs in shadow, and an
``event_id`` derived from the span, so a span delivered twice is applied once.

Spans that are neither tool nor agent spans (model calls, HTTP, ...) are
ignored. A tool span that cannot be judged is a :class:`Rejected` with a reason
(dead-lettered by :mod:`loopwarden.otel.ingest`): no tool name, or no
arguments (content capture is off, and every call of a tool would look alike).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, Raw

from loopwarden.otel.spans import STATUS_ERROR, Span
from loopwarden.runner.wire import bounded_payload, digest_payload
from loopwarden.schemas.events import ID_CAPS, Event, RunEnd, ToolCall, ToolResult, payload

ORIGIN = "otel"
DEFAULT_MAX_PAYLOAD_BYTES = 65_536
MAX_DEPTH = 64  # as the worker's max_depth: deeper JSON is kept as text

# Dead-letter reasons of the span path, beside the worker's `empty` and `too_large`.
SPAN_DEAD_LETTER_REASONS = (
    "otel_bad_request",  # not a trace export request in the configured encoding
    "otel_too_many_spans",  # more spans in one record than max_spans
    "otel_too_many_values",  # more messages/JSON values in one record than spans.MAX_MESSAGES (counted first)
    "otel_bad_span",  # a tool span without a valid trace id or span id
    "otel_no_tool_name",  # a tool span that names no tool
    "otel_no_arguments",  # a tool span without its arguments (content capture off)
    "otel_field_too_long",  # an id or tool name longer than the worker's cap (schemas.events.ID_CAPS)
)

# Field sources, first present wins (blank or redacted strings count as absent).
TOOL_NAME = ("gen_ai.tool.name", "tool.name", "traceloop.entity.name")
CALL_ID = ("gen_ai.tool.call.id", "tool.id")
ARGUMENTS = (
    "gen_ai.tool.call.arguments",
    "tool_arguments",  # PydanticAI before instrumentation version 3
    "gcp.vertex.agent.tool_call_args",  # Google ADK
    "input.value",
    "traceloop.entity.input",
)
RESULT = (
    "gen_ai.tool.call.result",
    "tool_response",
    "gcp.vertex.agent.tool_response",
    "output.value",
    "traceloop.entity.output",
)
AGENT = ("gen_ai.agent.name", "gen_ai.agent.id", "agent.name", "agent_name", "traceloop.workflow.name")
SESSION = ("gen_ai.conversation.id", "session.id", "traceloop.association.properties.session_id")
RUN = ("gen_ai.agent.call.id",)  # PydanticAI's run id; else the trace id
DEFAULT_AGENT = "otel"


class Rejected(msgspec.Struct, kw_only=True):
    """A tool span that cannot be mapped: the dead letter's reason and detail."""

    reason: str
    detail: str
    span: Span


class ToolEvents(msgspec.Struct, kw_only=True):
    """What one tool span becomes: its call (at the span's start) and its result (at its end)."""

    call: ToolCall
    result: ToolResult


class Mapped(msgspec.Struct, kw_only=True):
    """What one request's spans became: events in the order to publish, and rejected spans."""

    events: list[Event]
    rejected: list[Rejected]
    tool_spans: int = 0
    run_ends: int = 0


def _first(attrs: dict[str, Any], names: tuple[str, ...]) -> Any:
    return _source(attrs, names)[1]


# What instrumentations write in place of content they hide (OpenInference's TraceConfig): absent.
REDACTED = frozenset({"", "__REDACTED__"})


def _source(attrs: dict[str, Any], names: tuple[str, ...]) -> tuple[str, Any]:
    """(attribute name, value) of the first of ``names`` present, not blank, not redacted; ("", None) if none."""
    for name in names:
        value = attrs.get(name)
        if value is not None and not (isinstance(value, str) and value in REDACTED):
            return name, value
    return "", None


def _json_text(attrs: dict[str, Any], name: str) -> bool:
    """Whether the value of ``name`` is JSON text whatever it holds (a string result is a JSON string)."""
    if name.startswith("traceloop.entity."):
        return True  # OpenLLMetry writes json.dumps() of the input and output
    mime = {"input.value": "input.mime_type", "output.value": "output.mime_type"}.get(name)
    return mime is not None and attrs.get(mime) == "application/json"


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _kind(attrs: dict[str, Any], name: str) -> str:
    value = attrs.get(name)
    return value.lower() if isinstance(value, str) else ""


def is_tool_span(span: Span) -> bool:
    return _tool_attributes(span.attributes)


def is_agent_span(span: Span) -> bool:
    """An agent run's own span: its end ends the run."""
    return _agent_attributes(span.name, span.attributes)


def relevant(name: str, attrs: dict[str, Any]) -> bool:
    """Whether a span is a tool or agent span (the others are dropped as they are read)."""
    return _tool_attributes(attrs) or _agent_attributes(name, attrs)


def _tool_attributes(a: dict[str, Any]) -> bool:
    op = a.get("gen_ai.operation.name")
    if op == "execute_tool" or (op is None and "gen_ai.tool.name" in a):
        return True
    return _kind(a, "openinference.span.kind") == "tool" or _kind(a, "traceloop.span.kind") == "tool"


def _agent_attributes(name: str, a: dict[str, Any]) -> bool:
    if a.get("gen_ai.operation.name") == "invoke_agent":
        return True
    if name == "agent run" and "agent_name" in a:  # PydanticAI before instrumentation version 3
        return True
    return _kind(a, "openinference.span.kind") == "agent" or _kind(a, "traceloop.span.kind") in ("agent", "workflow")


def as_payload(value: Any, max_bytes: int, json_text: bool = False) -> Raw:
    """An attribute value as an event payload.

    Text that is a JSON object or array is that JSON (tools' arguments and
    structured results are sent as JSON text); other text is a string, as a
    runner would send a text result, unless ``json_text`` says the text is
    JSON whatever it holds. Payloads over ``max_bytes`` become a digest, JSON
    nested deeper than the worker accepts stays text.
    """
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        if len(data) > max_bytes:
            return digest_payload(data)
        head = value.lstrip()[:1]
        if (json_text or head in ("{", "[")) and data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
            try:
                msgspec.json.decode(data)
            except (msgspec.DecodeError, RecursionError):
                return payload(value)
            return Raw(data)
        return payload(value)
    raw = payload(value)
    return bounded_payload(raw, max_bytes)


def _openllmetry_input(value: Any) -> Any:
    """OpenLLMetry records a function's input as ``{"args": [...], "kwargs": {...}}``: the keyword
    arguments are the call's arguments when there are no positional ones."""
    if not isinstance(value, str) or not value.startswith('{"args": []'):
        return value
    try:
        parsed = msgspec.json.decode(value)
    except (msgspec.DecodeError, RecursionError):
        return value
    if isinstance(parsed, dict) and parsed.get("args") == [] and isinstance(parsed.get("kwargs"), dict):
        return msgspec.json.encode(parsed["kwargs"]).decode()
    return value


class RunIds(msgspec.Struct, kw_only=True):
    agent_id: str
    session_id: str
    run_id: str


def run_ids(span: Span) -> RunIds:
    """Agent, session and run of a span: the names and ids it carries, else its trace."""
    a = span.attributes
    agent = _text(_first(a, AGENT)) or _text(span.resource.get("service.name")) or DEFAULT_AGENT
    session = _text(_first(a, SESSION)) or span.trace_id
    run = _text(_first(a, RUN)) or span.trace_id
    return RunIds(agent_id=agent, session_id=session, run_id=run)


def _error(span: Span) -> str | None:
    """The error of a failed span: its exception event, else its status message, else error.type."""
    if span.status_code != STATUS_ERROR:
        return None
    for event in span.events:
        if event.name == "exception":
            kind = _text(event.attributes.get("exception.type"))
            message = _text(event.attributes.get("exception.message"))
            if kind or message:
                return f"{kind}: {message}" if kind and message else (message or kind)
    return span.status_message or _text(span.attributes.get("error.type")) or "error"


def _too_long(**fields: str | None) -> tuple[str, int] | None:
    """The first field over its cap, and the cap: the worker's own (:data:`ID_CAPS`), defined once,
    so a span the bridge accepts is never an event the worker dead-letters as ``id_too_long``."""
    for name, value in fields.items():
        if value is not None and len(value) > ID_CAPS[name]:
            return value[:40], ID_CAPS[name]
    return None


def map_tool_span(span: Span, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> ToolEvents | Rejected:
    """A tool span's call and result, or why it cannot be judged."""
    if not span.trace_id or not span.span_id:
        return Rejected(reason="otel_bad_span", detail="a tool span without a trace id or span id", span=span)
    a = span.attributes
    tool = _text(_first(a, TOOL_NAME))
    if tool is None and span.name.startswith("execute_tool "):
        tool = span.name[len("execute_tool ") :].strip() or None
    where = f"trace {span.trace_id} span {span.span_id}"
    if tool is None:
        return Rejected(
            reason="otel_no_tool_name", detail=f"tool span {span.name[:80]!r} names no tool ({where})", span=span
        )
    args_from, args = _source(a, ARGUMENTS)
    if args is None:
        return Rejected(
            reason="otel_no_arguments",
            detail=f"tool span of {tool[:80]!r} carries no arguments: turn on content capture ({where})",
            span=span,
        )
    if args_from == "traceloop.entity.input":
        args = _openllmetry_input(args)
    ids = run_ids(span)
    call_id = _text(_first(a, CALL_ID))
    long = _too_long(
        tool_name=tool, tool_call_id=call_id, agent_id=ids.agent_id, session_id=ids.session_id, run_id=ids.run_id
    )
    if long is not None:
        return Rejected(
            reason="otel_field_too_long", detail=f"{long[0]!r}... is longer than {long[1]} ({where})", span=span
        )
    params = as_payload(args, max_payload_bytes, _json_text(a, args_from))
    common = dict(
        agent_id=ids.agent_id,
        session_id=ids.session_id,
        run_id=ids.run_id,
        tool_name=tool,
        tool_call_id=call_id,
        params=params,
        origin=ORIGIN,
    )
    base = f"otel:{span.trace_id}:{span.span_id}"
    call = ToolCall(**common, ts=span.start_ns / 1e9, event_id=f"{base}:call")
    error = _error(span)
    result_from, result_value = _source(a, RESULT)
    result = ToolResult(
        **common,
        ts=span.end_ns / 1e9,
        event_id=f"{base}:result",
        result=UNSET
        if error is not None or result_value is None
        else as_payload(result_value, max_payload_bytes, _json_text(a, result_from)),
        error=UNSET if error is None else payload(error[:max_payload_bytes]),  # a string: an Error's message
    )
    return ToolEvents(call=call, result=result)


def map_run_end(span: Span) -> RunEnd | None:
    """The end of an agent run's span; None for a span too odd to name a run."""
    if not span.trace_id or not span.span_id:
        return None
    ids = run_ids(span)
    if _too_long(agent_id=ids.agent_id, session_id=ids.session_id, run_id=ids.run_id) is not None:
        return None
    if ids.run_id == span.trace_id and span.parent_span_id:
        return None  # a nested agent span of a trace-wide run: the run goes on
    return RunEnd(
        agent_id=ids.agent_id,
        session_id=ids.session_id,
        run_id=ids.run_id,
        ts=span.end_ns / 1e9,
        event_id=f"otel:{span.trace_id}:{span.span_id}:end",
        origin=ORIGIN,
    )


_PHASE_CALL, _PHASE_RESULT, _PHASE_END = 0, 1, 2


def map_spans(spans: list[Span], max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> Mapped:
    """One request's spans as events, in time order (calls at their span's start, results and run
    ends at theirs); ties keep the order of the spans' starts."""
    keyed: list[tuple[int, int, int, Event]] = []
    rejected: list[Rejected] = []
    tools = ends = 0
    order = sorted(range(len(spans)), key=lambda i: spans[i].start_ns)
    for rank, i in enumerate(order):
        span = spans[i]
        if is_tool_span(span):
            tools += 1
            mapped = map_tool_span(span, max_payload_bytes)
            if isinstance(mapped, Rejected):
                rejected.append(mapped)
                continue
            keyed.append((span.start_ns, _PHASE_CALL, rank, mapped.call))
            keyed.append((max(span.end_ns, span.start_ns), _PHASE_RESULT, rank, mapped.result))
        elif is_agent_span(span):
            end = map_run_end(span)
            if end is not None:
                ends += 1
                keyed.append((span.end_ns, _PHASE_END, rank, end))
    keyed.sort(key=lambda item: item[:3])
    return Mapped(events=[item[3] for item in keyed], rejected=rejected, tool_spans=tools, run_ends=ends)
