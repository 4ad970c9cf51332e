"""A span record is counted on the wire before it is parsed (bytes bound a record, not what it builds)."""

from __future__ import annotations

import pytest

from loopwarden.otel.spans import MAX_MESSAGES, SpanDecodeError, decode_spans


def field(number: int, payload: bytes) -> bytes:
    size, out = len(payload), bytearray([number << 3 | 2])
    while True:
        if size < 0x80:
            out.append(size)
            return bytes(out) + payload
        out.append(size & 0x7F | 0x80)
        size >>= 7


def request(spans: bytes) -> bytes:
    return field(1, field(2, spans))  # resource_spans { scope_spans { spans... } }


def test_too_many_empty_spans_are_refused_before_the_request_is_parsed(monkeypatch):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    def parse(self, raw):
        raise AssertionError("parsed: 8 MB of empty spans build four million messages first")

    monkeypatch.setattr(ExportTraceServiceRequest, "ParseFromString", parse)
    with pytest.raises(SpanDecodeError) as info:
        decode_spans(request(field(2, b"") * 4_000_000), "otlp_proto", 9_000_000, 20_000)
    assert info.value.reason == "otel_too_many_spans"


def test_one_span_of_a_million_empty_attributes_is_refused():
    span = field(9, b"") * (MAX_MESSAGES + 1)  # Span.attributes, each an empty KeyValue
    with pytest.raises(SpanDecodeError) as info:
        decode_spans(request(field(2, span)), "otlp_proto", 9_000_000, 20_000)
    assert info.value.reason == "otel_too_many_values"


def test_json_of_too_many_objects_is_refused_before_decoding():
    raw = b'{"resourceSpans": [' + b"{}," * (MAX_MESSAGES + 1) + b"{}]}"
    with pytest.raises(SpanDecodeError) as info:
        decode_spans(raw, "otlp_json", 9_000_000, 20_000)
    assert info.value.reason == "otel_too_many_values"


def test_a_real_request_is_counted_and_decoded():
    from tests.otel.otel_helpers import encoded, fixture

    raw = encoded(fixture("pydantic_ai.otlp.json"), "otlp_proto")
    assert decode_spans(raw, "otlp_proto", 9_000_000, 20_000)
