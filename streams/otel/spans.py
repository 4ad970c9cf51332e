"""One Kafka record of the Collector's Kafka exporter -> bounded, encoding-neutral spans.

The exporter writes one ``ExportTraceServiceRequest`` per record, as OTLP
protobuf (``otlp_proto``, its default) or OTLP JSON (``otlp_json``: lowerCamelCase
keys, trace and span ids in hex, 64-bit integers as strings). Both decode to
the same :class:`Span` values, so the mapping (:mod:`loopwarden.otel.mapping`)
is written once.

Everything is bounded before or while it is read: the record's size, the
number of spans, and the attributes kept (only the names the mapping reads,
:data:`WANTED`, plus the association properties of OpenLLMetry). Each span keeps
its own encoded bytes for a dead letter.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any, Literal

import msgspec

Encoding = Literal["otlp_proto", "otlp_json"]
ENCODINGS: tuple[str, ...] = ("otlp_proto", "otlp_json")
STATUS_ERROR = 2

# The attributes the mapping reads; any other is skipped without being converted.
WANTED = frozenset(
    {
        # OpenTelemetry GenAI semantic conventions
        "gen_ai.operation.name",
        "gen_ai.tool.name",
        "gen_ai.tool.call.id",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.conversation.id",
        "gen_ai.agent.name",
        "gen_ai.agent.id",
        "gen_ai.agent.call.id",  # PydanticAI: the agent run's id
        "error.type",
        # PydanticAI before instrumentation version 3
        "tool_arguments",
        "tool_response",
        "agent_name",
        # Google ADK (its tool spans follow the GenAI conventions but for arguments and result)
        "gcp.vertex.agent.tool_call_args",
        "gcp.vertex.agent.tool_response",
        "gcp.vertex.agent.event_id",  # marks ADK's spans (its tool results are wrapped as {"result": ...})
        "gen_ai.workflow.name",  # ADK's root invoke_workflow span names its root agent
        # OpenInference
        "openinference.span.kind",
        "tool.name",
        "tool.id",
        "input.value",
        "input.mime_type",
        "output.value",
        "output.mime_type",
        "session.id",
        "agent.name",
        # OpenLLMetry
        "traceloop.span.kind",
        "traceloop.entity.name",
        "traceloop.entity.input",
        "traceloop.entity.output",
        "traceloop.workflow.name",
        # exception events
        "exception.type",
        "exception.message",
        # resource
        "service.name",
    }
)
ASSOCIATION_PREFIX = "traceloop.association.properties."
MAX_VALUE_DEPTH = 8  # nesting of array/kvlist attribute values kept
MAX_VALUE_ITEMS = 1024  # items of one array/kvlist attribute value kept
MAX_EVENTS = 16  # span events looked at (for an "exception" event)
# Values (messages, JSON objects/arrays) one record may decode to. Bytes bound a record, not what it
# parses into: 8 MB of empty spans are four million messages (+700 MB); this many cost ~85 MB at most.
MAX_MESSAGES = 500_000


class SpanDecodeError(ValueError):
    """A record that is not a trace export request of its encoding; ``reason`` names why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class SpanEvent(msgspec.Struct, kw_only=True):
    name: str
    attributes: dict[str, Any]


class Span(msgspec.Struct, kw_only=True):
    """What the mapping needs of one span (ids in lowercase hex, times in ns since the epoch)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    events: list[SpanEvent]
    resource: dict[str, Any]
    source: Any = None  # the decoded span (protobuf message or JSON object), for its dead letter

    def raw(self) -> bytes:
        """This span alone, in its record's encoding (only a dead letter needs it)."""
        src = self.source
        if src is None:
            return b""
        return src.SerializeToString() if hasattr(src, "SerializeToString") else _json_encoder.encode(src)


# OpenInference's LLM span lists the calls the model asked for (``llm.output_messages.<i>.message.tool_calls.<j>.``
# + these): their arguments as the model gave them, read when a tool span has only a bare value.
ANNOUNCED_PREFIX = "llm.output_messages."
ANNOUNCED_SUFFIXES = (".tool_call.id", ".tool_call.function.name", ".tool_call.function.arguments")


def _wanted(key: str) -> bool:
    return (
        key in WANTED
        or key.startswith(ASSOCIATION_PREFIX)
        or (key.startswith(ANNOUNCED_PREFIX) and key.endswith(ANNOUNCED_SUFFIXES))
    )


# -- protobuf -------------------------------------------------------------------------------------


def _pb_value(value: Any, depth: int = 0) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind in ("array_value", "kvlist_value"):
        if depth >= MAX_VALUE_DEPTH:
            return None
        items = getattr(value, kind).values
        if kind == "array_value":
            return [_pb_value(v, depth + 1) for v in items[:MAX_VALUE_ITEMS]]
        return {kv.key: _pb_value(kv.value, depth + 1) for kv in items[:MAX_VALUE_ITEMS]}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    if kind == "string_value_strindex":
        return None  # a dictionary-encoded string (profiles only): not in a trace export
    return getattr(value, kind)


def _pb_attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _pb_value(kv.value) for kv in items if _wanted(kv.key)}


Keep = Callable[[str, dict[str, Any]], bool]  # (span name, its wanted attributes) -> keep the span?


def _all(name: str, attributes: dict[str, Any]) -> bool:
    return True


# The message-typed fields of each OTLP message a trace export request holds (field number -> type).
_CHILDREN: dict[str, dict[int, str]] = {
    "request": {1: "resource_spans"},
    "resource_spans": {1: "resource", 2: "scope_spans"},
    "resource": {1: "kv", 3: "leaf"},
    "scope_spans": {1: "scope", 2: "span"},
    "scope": {3: "kv"},
    "span": {9: "kv", 11: "event", 13: "link", 15: "leaf"},
    "event": {3: "kv"},
    "link": {4: "kv"},
    "kv": {2: "any"},
    "any": {5: "array", 6: "kvlist"},
    "array": {1: "any"},
    "kvlist": {1: "kv"},
    "leaf": {},
}


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def proto_counts(raw: bytes, max_messages: int, max_spans: int) -> tuple[int, int]:
    """(messages, spans) of an OTLP protobuf trace export request, read off the wire format without
    building them; stops as soon as either is over its limit. A malformed request is counted as far
    as it reads (the parser then refuses it)."""
    messages = spans = 0
    todo = [("request", 0, len(raw))]
    try:
        while todo:
            kind, pos, end = todo.pop()
            children = _CHILDREN[kind]
            while pos < end:
                tag, pos = _varint(raw, pos)
                wire = tag & 7
                if wire == 0:
                    _, pos = _varint(raw, pos)
                elif wire == 1:
                    pos += 8
                elif wire == 5:
                    pos += 4
                elif wire == 2:
                    size, pos = _varint(raw, pos)
                    child = children.get(tag >> 3)
                    if child is not None:
                        messages += 1
                        spans += child == "span"
                        if messages > max_messages or spans > max_spans:
                            return messages, spans
                        todo.append((child, pos, min(pos + size, end)))
                    pos += size
                else:
                    return messages, spans  # groups: not OTLP; the parser decides
    except (IndexError, ValueError):
        pass
    return messages, spans


def _decode_proto(raw: bytes, max_spans: int, keep: Keep, max_messages: int = MAX_MESSAGES) -> list[Span]:
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    messages, spans = proto_counts(raw, max_messages, max_spans)
    if spans > max_spans:
        raise SpanDecodeError("otel_too_many_spans", f"more than {max_spans} spans")
    if messages > max_messages:
        raise SpanDecodeError("otel_too_many_values", f"more than {max_messages} messages (spans, attributes...)")
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(raw)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise SpanDecodeError("otel_bad_request", f"not an OTLP protobuf trace export: {exc}") from None
    count = sum(len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans)
    if count > max_spans:
        raise SpanDecodeError("otel_too_many_spans", f"{count} spans > limit {max_spans}")
    out = []
    for rs in request.resource_spans:
        resource = _pb_attributes(rs.resource.attributes)
        for scope in rs.scope_spans:
            for s in scope.spans:
                attributes = _pb_attributes(s.attributes)
                if not keep(s.name, attributes):
                    continue
                out.append(
                    Span(
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        name=s.name,
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attributes=attributes,
                        status_code=s.status.code,
                        status_message=s.status.message,
                        events=[
                            SpanEvent(name=e.name, attributes=_pb_attributes(e.attributes))
                            for e in s.events[:MAX_EVENTS]
                        ],
                        resource=resource,
                        source=s,
                    )
                )
    return out


# -- JSON -----------------------------------------------------------------------------------------

_STATUS_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_json_encoder = msgspec.json.Encoder()


def _get(obj: Any, camel: str, snake: str, default: Any = None) -> Any:
    """A field by its OTLP/JSON name, or by its protobuf name (receivers accept both)."""
    if not isinstance(obj, dict):
        return default
    value = obj.get(camel)
    if value is None:
        value = obj.get(snake, default)
    return default if value is None else value


def _list(obj: Any, camel: str, snake: str) -> list:
    value = _get(obj, camel, snake, [])
    return value if isinstance(value, list) else []


def _int(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit() and len(value) <= 20:
        return int(value)
    return 0


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _json_value(value: Any, depth: int = 0) -> Any:
    """An OTLP/JSON ``AnyValue``; a value of the wrong JSON type is None (never an object taken whole)."""
    if not isinstance(value, dict):
        return None
    if "stringValue" in value or "string_value" in value:
        text = _get(value, "stringValue", "string_value")
        return text if isinstance(text, str) else None
    if "boolValue" in value or "bool_value" in value:
        flag = _get(value, "boolValue", "bool_value")
        return flag if isinstance(flag, bool) else None
    if "doubleValue" in value or "double_value" in value:
        number = _get(value, "doubleValue", "double_value")
        return number if isinstance(number, (int, float)) and not isinstance(number, bool) else None
    if "intValue" in value or "int_value" in value:
        raw = _get(value, "intValue", "int_value")
        if isinstance(raw, str):
            try:
                return int(raw) if len(raw) <= 24 else None
            except ValueError:
                return None
        return raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    if "bytesValue" in value or "bytes_value" in value:
        data = _get(value, "bytesValue", "bytes_value")
        return data if isinstance(data, str) else None
    if depth >= MAX_VALUE_DEPTH:
        return None
    array = _get(value, "arrayValue", "array_value")
    if isinstance(array, dict):
        return [_json_value(v, depth + 1) for v in _list(array, "values", "values")[:MAX_VALUE_ITEMS]]
    kvlist = _get(value, "kvlistValue", "kvlist_value")
    if isinstance(kvlist, dict):
        return {
            kv["key"]: _json_value(kv.get("value"), depth + 1)
            for kv in _list(kvlist, "values", "values")[:MAX_VALUE_ITEMS]
            if isinstance(kv, dict) and isinstance(kv.get("key"), str)
        }
    return None


def _json_attributes(items: list) -> dict[str, Any]:
    return {
        kv["key"]: _json_value(kv.get("value"))
        for kv in items
        if isinstance(kv, dict) and isinstance(kv.get("key"), str) and _wanted(kv["key"])
    }


def _hex_id(value: Any) -> str:
    text = _str(value).lower()
    return text if all(c in "0123456789abcdef" for c in text) else ""


def _status_code(value: Any) -> int:
    if isinstance(value, str):
        return _STATUS_NAMES.get(value, 0)
    return _int(value)


def _json_spans(request: Any) -> Iterator[tuple[dict, dict]]:
    for rs in _list(request, "resourceSpans", "resource_spans"):
        resource = _json_attributes(_list(_get(rs, "resource", "resource", {}), "attributes", "attributes"))
        for scope in _list(rs, "scopeSpans", "scope_spans"):
            for s in _list(scope, "spans", "spans"):
                if isinstance(s, dict):
                    yield resource, s


def _decode_json(raw: bytes, max_spans: int, keep: Keep, max_messages: int = MAX_MESSAGES) -> list[Span]:
    containers = raw.count(b"{") + raw.count(b"[")  # an upper bound of the objects and arrays it decodes to
    if containers > max_messages:
        raise SpanDecodeError("otel_too_many_values", f"{containers} objects/arrays > limit {max_messages}")
    try:
        request = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise SpanDecodeError("otel_bad_request", f"not OTLP JSON: {exc}") from None
    if not isinstance(request, dict):
        raise SpanDecodeError("otel_bad_request", f"an OTLP JSON request is an object, not {type(request).__name__}")
    count = sum(1 for _ in _json_spans(request))
    if count > max_spans:
        raise SpanDecodeError("otel_too_many_spans", f"{count} spans > limit {max_spans}")
    out = []
    for resource, s in _json_spans(request):
        name = _str(s.get("name"))
        attributes = _json_attributes(_list(s, "attributes", "attributes"))
        if not keep(name, attributes):
            continue
        status = _get(s, "status", "status", {})
        events = [e for e in _list(s, "events", "events")[:MAX_EVENTS] if isinstance(e, dict)]
        out.append(
            Span(
                trace_id=_hex_id(_get(s, "traceId", "trace_id")),
                span_id=_hex_id(_get(s, "spanId", "span_id")),
                parent_span_id=_hex_id(_get(s, "parentSpanId", "parent_span_id")),
                name=name,
                start_ns=_int(_get(s, "startTimeUnixNano", "start_time_unix_nano")),
                end_ns=_int(_get(s, "endTimeUnixNano", "end_time_unix_nano")),
                attributes=attributes,
                status_code=_status_code(_get(status, "code", "code")),
                status_message=_str(_get(status, "message", "message")),
                events=[
                    SpanEvent(
                        name=_str(e.get("name")), attributes=_json_attributes(_list(e, "attributes", "attributes"))
                    )
                    for e in events
                ],
                resource=resource,
                source=s,
            )
        )
    return out


def decode_spans(
    raw: bytes | None,
    encoding: str,
    max_bytes: int,
    max_spans: int,
    keep: Keep = _all,
    max_messages: int = MAX_MESSAGES,
) -> list[Span]:
    """The spans of one exporter record that ``keep`` wants (all by default; the span count limit is
    on all of them); :class:`SpanDecodeError` for a record that cannot be read. Spans and values
    are counted before anything is built (``max_spans``, ``max_messages``)."""
    if not raw:
        raise SpanDecodeError("empty", "record has no value")
    if len(raw) > max_bytes:
        raise SpanDecodeError("too_large", f"{len(raw)} bytes > limit {max_bytes}")
    if encoding == "otlp_json":
        return _decode_json(raw, max_spans, keep, max_messages)
    if encoding == "otlp_proto":
        return _decode_proto(raw, max_spans, keep, max_messages)
    raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, not {encoding!r}")
