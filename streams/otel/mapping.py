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

from loopwarden.otel.spans import ANNOUNCED_PREFIX, STATUS_ERROR, Span
from loopwarden.runner.results import as_shown
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
AGENT = (
    "gen_ai.agent.name",
    "gen_ai.agent.id",
    "agent.name",
    "agent_name",
    "traceloop.workflow.name",
    "gen_ai.workflow.name",  # Google ADK's root `invoke_workflow` span: the root agent's name
)
SESSION = ("gen_ai.conversation.id", "session.id", "traceloop.association.properties.session_id")  # with a run id
RUN = ("gen_ai.agent.call.id",)  # PydanticAI's run id; else the trace id
DEFAULT_AGENT = "otel"


class Rejected(msgspec.Struct, kw_only=True):
    """A tool span that cannot be mapped: the dead letter's reason and detail."""

    reason: str
    detail: str
    span: Span


class ToolEvents(msgspec.Struct, kw_only=True):
    """What one tool span becomes: its call (at the span's start) and its result (at its end), and
    what the span could not say (``GAP_*``)."""

    call: ToolCall
    result: ToolResult
    gaps: tuple[str, ...] = ()


class Mapped(msgspec.Struct, kw_only=True):
    """What one request's spans became: events in the order to publish, rejected spans, and what the
    mapped tool spans could not say (``gaps``: (family, what) per span, see :func:`family`)."""

    events: list[Event]
    rejected: list[Rejected]
    tool_spans: int = 0
    run_ends: int = 0
    gaps: list[tuple[str, str]] = msgspec.field(default_factory=list)


# What a mapped tool span can lack: detectors that read it do not see the call exactly.
GAP_NO_RESULT = "no_result"  # no result and no error: the outcome-based detectors (no progress, ping-pong) are blind
GAP_BARE_ARGUMENTS = "bare_arguments"  # a one-argument tool's bare value, its name unknown: not a runner's hash


def family(span: Span) -> str:
    """The instrumentation family a span comes from, as its attribute names tell it."""
    a = span.attributes
    if "traceloop.span.kind" in a:
        return "openllmetry"
    if "openinference.span.kind" in a:
        return "openinference"
    if "gcp.vertex.agent.event_id" in a or "gcp.vertex.agent.tool_call_args" in a:
        return "google_adk"
    if span.name == "openclaw.tool.execution":
        return "openclaw"
    if "tool_arguments" in a or "gen_ai.agent.call.id" in a:
        return "pydantic_ai"
    return "genai"


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
    """Whether a span is a tool or agent span, a LangGraph tools node listing its calls, or a model span
    announcing calls (the others are dropped as they are read)."""
    return _tool_attributes(attrs) or _agent_attributes(name, attrs) or _is_tool_node(name, attrs) or _announces(attrs)


def _tool_attributes(a: dict[str, Any]) -> bool:
    op = a.get("gen_ai.operation.name")
    if op == "execute_tool" or (op is None and "gen_ai.tool.name" in a):
        return True
    return _kind(a, "openinference.span.kind") == "tool" or _kind(a, "traceloop.span.kind") == "tool"


def _agent_attributes(name: str, a: dict[str, Any]) -> bool:
    if a.get("gen_ai.operation.name") in ("invoke_agent", "invoke_workflow"):  # ADK's root: invoke_workflow
        return True
    if name == "agent run" and "agent_name" in a:  # PydanticAI before instrumentation version 3
        return True
    if name == "openclaw.run":  # OpenClaw's diagnostics-otel: one span per agent run
        return True
    if name == "LangGraph" and _kind(a, "openinference.span.kind") == "chain":  # a compiled graph's own span
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


def _json_object(value: Any) -> Any:
    """``value`` parsed when it is JSON text of an object, else None."""
    if not isinstance(value, str) or not value.startswith("{"):
        return None  # (msgspec's decoder bounds nesting itself: RecursionError, caught)
    try:
        parsed = msgspec.json.decode(value)
    except (msgspec.DecodeError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _callback_payload(value: Any) -> tuple[Any, str | None]:
    """OpenLLMetry's LangChain tool span records the whole ``on_tool_start`` payload (``input_str``,
    ``tags``, ``metadata`` with the graph step and checkpoint, ``inputs``, ``kwargs``) as the arguments:
    the call's own arguments are ``inputs``, its id ``kwargs.tool_call_id``. Anything else: unchanged."""
    parsed = _json_object(value)
    if parsed is None or "input_str" not in parsed:
        return value, None
    inputs, kwargs = parsed.get("inputs"), parsed.get("kwargs")
    call_id = kwargs.get("tool_call_id") if isinstance(kwargs, dict) else None
    call_id = call_id if isinstance(call_id, str) else None
    if isinstance(inputs, dict):
        return msgspec.json.encode(inputs).decode(), call_id
    return parsed.get("input_str", value), call_id


def _tool_message(value: Any) -> tuple[Any, str | None]:
    """A LangChain tool message recorded whole as the result: its content and its tool call id.

    OpenInference writes ``{"type": "tool", "data": {"content": ..., "tool_call_id": ...}}``;
    OpenLLMetry ``{"output": <the message, serialized: {"lc": 1, "kwargs": {"content": ...}}>, "kwargs": ...}``
    (or the tool's plain return value as ``output``). Anything else: unchanged, no id."""
    parsed = _json_object(value)
    if parsed is None:
        return value, None
    if "output" in parsed and set(parsed) <= {"output", "kwargs"}:  # OpenLLMetry's wrapper
        inner = parsed["output"]
        if isinstance(inner, dict) and inner.get("lc") == 1:
            message = inner.get("kwargs")
            if isinstance(message, dict) and message.get("type") == "tool" and "content" in message:
                return _content(message["content"]), _id(message.get("tool_call_id"))
        return (inner if isinstance(inner, str) else msgspec.json.encode(inner).decode()), None
    data = parsed.get("data")
    if parsed.get("type") == "tool" and isinstance(data, dict) and "content" in data:  # OpenInference
        return _content(data["content"]), _id(data.get("tool_call_id"))
    return value, None


def _adk_result(value: Any) -> Any:
    """Google ADK records a tool's return value that is not a dict as ``{"result": <value>}``: the value."""
    parsed = _json_object(value)
    if parsed is not None and len(parsed) == 1 and "result" in parsed:
        inner = parsed["result"]
        return inner if isinstance(inner, str) else msgspec.json.encode(inner).decode()
    return value


def _content(content: Any) -> Any:
    """A tool message's content: text as text, anything else (content blocks) as its JSON."""
    return content if isinstance(content, str) else msgspec.json.encode(content).decode()


def _id(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def tool_calls_of(span: Span) -> list[tuple[str, str, Any]]:
    """(name, id, arguments) of each call a LangGraph tools node span lists as its input (OpenInference
    ``CHAIN`` span: ``[{"name", "args", "id", "type": "tool_call"}, ...]``): the arguments as the model gave
    them, where the tool span of a one-argument tool records only the bare value."""
    value = span.attributes.get("input.value")
    if not isinstance(value, str) or not value.startswith("[{") or '"tool_call"' not in value:
        return []
    try:
        parsed = msgspec.json.decode(value)
    except (msgspec.DecodeError, RecursionError):
        return []
    out = []
    for item in parsed if isinstance(parsed, list) else ():
        if isinstance(item, dict) and item.get("type") == "tool_call" and isinstance(item.get("args"), dict):
            out.append((str(item.get("name")), str(item.get("id") or ""), item["args"]))
    return out


def _is_tool_node(name: str, a: dict[str, Any]) -> bool:
    """An OpenInference LangGraph span whose input is a list of tool calls (see :func:`tool_calls_of`)."""
    if _kind(a, "openinference.span.kind") != "chain":
        return False
    value = a.get("input.value")
    return isinstance(value, str) and value.startswith("[{") and '"tool_call"' in value


def _announces(a: dict[str, Any]) -> bool:
    """An OpenInference LLM span whose output lists tool calls (their arguments as the model gave them)."""
    return _kind(a, "openinference.span.kind") == "llm" and any(
        k.startswith(ANNOUNCED_PREFIX) and k.endswith(".tool_call.id") for k in a
    )


def announced_calls(span: Span) -> list[tuple[str, str, str]]:
    """(name, id, arguments as JSON text of an object) of each call an OpenInference LLM span's output lists
    (``llm.output_messages.<i>.message.tool_calls.<j>.tool_call.{id,function.name,function.arguments}``)."""
    a = span.attributes
    out = []
    for key, call_id in a.items():
        if not (key.startswith(ANNOUNCED_PREFIX) and key.endswith(".tool_call.id")) or not isinstance(call_id, str):
            continue
        stem = key[: -len("id")]
        name, args = a.get(stem + "function.name"), a.get(stem + "function.arguments")
        if call_id and isinstance(name, str) and _json_object(args) is not None:
            out.append((name, call_id, args))
    return out


class Announced:
    """The arguments of the tool calls models announced (OpenInference LLM spans), by trace and call id,
    kept across records: a tool span whose tools-node span is exported in a later record (a batch that
    ends between them) still gets its call's own arguments. Bounded: the oldest go first."""

    def __init__(self, max_calls: int = 4096, max_chars: int = 8 << 20) -> None:
        self.max_calls, self.max_chars = max_calls, max_chars
        self.args: dict[tuple[str, str], str] = {}
        self.chars = 0

    def add(self, span: Span, max_chars: int) -> None:
        for _, call_id, args in announced_calls(span):
            key = (span.trace_id, call_id)
            if len(args) > max_chars or key in self.args:
                continue
            self.args[key] = args
            self.chars += len(args)
            while len(self.args) > self.max_calls or self.chars > self.max_chars:
                self.chars -= len(self.args.pop(next(iter(self.args))))

    def get(self, trace_id: str, call_id: str | None) -> str | None:
        return self.args.get((trace_id, call_id)) if call_id else None


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
    run = _text(_first(a, RUN))
    if run is None:
        # A run named by its trace is the trace's in every way: instrumentations put the conversation on
        # the root span only (OpenLLMetry, Google ADK) or on every span (OpenInference), so a session taken
        # from the spans would file the run end and the tool events under different runs.
        return RunIds(agent_id=agent, session_id=span.trace_id, run_id=span.trace_id)
    session = _text(_first(a, SESSION)) or span.trace_id
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


class Listed(msgspec.Struct, kw_only=True):
    """The tool calls that LangGraph tools-node spans of one record list: by call id, and by the node's span."""

    by_id: dict[str, Any] = msgspec.field(default_factory=dict)
    by_node: dict[str, list[tuple[str, str, Any]]] = msgspec.field(default_factory=dict)

    def add(self, span: Span) -> None:
        calls = tool_calls_of(span)
        if calls:
            self.by_node[span.span_id] = calls
            for _, call_id, args in calls:
                if call_id:
                    self.by_id[call_id] = args

    def find(self, span: Span, tool: str, call_id: str | None) -> Any:
        """The listed arguments of this tool span's call: by its id, else the one call of its name in its
        parent node; None when not listed."""
        if call_id and call_id in self.by_id:
            return self.by_id[call_id]
        named = [args for name, _, args in self.by_node.get(span.parent_span_id, ()) if name == tool]
        return named[0] if len(named) == 1 else None


NO_LISTED = Listed()


def _as_shown(raw: Raw) -> Raw:
    """The result as a runner's adapter publishes it (``results.as_shown``: a plain object as its JSON
    text), so a span's outcome hashes as the native event's and a changing object is progress."""
    shown = as_shown(raw)
    return shown if isinstance(shown, Raw) else payload(shown)


def map_tool_span(
    span: Span,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    listed: Listed = NO_LISTED,
    announced: Announced | None = None,
) -> ToolEvents | Rejected:
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
    call_id = _text(_first(a, CALL_ID))
    openllmetry, openinference = "traceloop.span.kind" in a, "openinference.span.kind" in a
    payload_call_id = message_call_id = None
    if openllmetry:
        args, payload_call_id = _callback_payload(args)
    if args_from == "traceloop.entity.input":
        args = _openllmetry_input(args)
    result_from, result_value = _source(a, RESULT)
    recorded = result_value
    if openllmetry or openinference:  # LangChain's tool message, recorded whole
        result_value, message_call_id = _tool_message(result_value)
    if "gcp.vertex.agent.event_id" in a:
        result_value = _adk_result(result_value)
    if result_value is not recorded:
        result_from = ""  # the text taken out of a wrapper is the tool's text: "42" stays a string
    call_id = call_id or payload_call_id or message_call_id
    gaps: tuple[str, ...] = ()
    if openinference:
        found = listed.find(span, tool, call_id)
        said = announced.get(span.trace_id, call_id) if announced is not None and found is None else None
        if found is not None:  # the model's own arguments (a one-argument tool's span has the bare value)
            args, args_from = msgspec.json.encode(found).decode(), ""
        elif said is not None:  # as the model's span announced them (its tools node is in another record)
            args, args_from = said, ""
        elif not (isinstance(args, str) and args.lstrip()[:1] == "{"):
            gaps = (GAP_BARE_ARGUMENTS,)
    ids = run_ids(span)
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
    result = ToolResult(
        **common,
        ts=span.end_ns / 1e9,
        event_id=f"{base}:result",
        result=UNSET
        if error is not None or result_value is None
        else _as_shown(as_payload(result_value, max_payload_bytes, _json_text(a, result_from))),
        error=UNSET if error is None else payload(error[:max_payload_bytes]),  # a string: an Error's message
    )
    if error is None and result_value is None:
        gaps += (GAP_NO_RESULT,)
    return ToolEvents(call=call, result=result, gaps=gaps)


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


def map_spans(
    spans: list[Span], max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES, announced: Announced | None = None
) -> Mapped:
    """One request's spans as events, in time order (calls at their span's start, results and run
    ends at theirs); ties keep the order of the spans' starts. ``announced``: the calls models announced
    in earlier records (and this one's are added to it); None: this record's only."""
    keyed: list[tuple[int, int, int, Event]] = []
    rejected: list[Rejected] = []
    gaps: list[tuple[str, str]] = []
    tools = ends = 0
    order = sorted(range(len(spans)), key=lambda i: spans[i].start_ns)
    listed = Listed()
    announced = announced if announced is not None else Announced()
    for span in spans:
        if _is_tool_node(span.name, span.attributes):
            listed.add(span)
        elif _announces(span.attributes):
            announced.add(span, max_payload_bytes)
    for rank, i in enumerate(order):
        span = spans[i]
        if is_tool_span(span):
            tools += 1
            mapped = map_tool_span(span, max_payload_bytes, listed, announced)
            if isinstance(mapped, Rejected):
                rejected.append(mapped)
                continue
            gaps.extend((family(span), gap) for gap in mapped.gaps)
            keyed.append((span.start_ns, _PHASE_CALL, rank, mapped.call))
            keyed.append((max(span.end_ns, span.start_ns), _PHASE_RESULT, rank, mapped.result))
        elif is_agent_span(span):
            end = map_run_end(span)
            if end is not None:
                ends += 1
                keyed.append((span.end_ns, _PHASE_END, rank, end))
    keyed.sort(key=lambda item: item[:3])
    return Mapped(events=[item[3] for item in keyed], rejected=rejected, tool_spans=tools, run_ends=ends, gaps=gaps)
