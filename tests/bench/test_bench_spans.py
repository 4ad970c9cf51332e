"""The span benchmark's record maps as an instrumented agent's would (smoke test; no timing asserted)."""

import pytest

pytest.importorskip("opentelemetry.proto")

from loopwarden.bench.spans import bench_spans, build_request, encode  # noqa: E402
from loopwarden.otel.mapping import map_spans  # noqa: E402
from loopwarden.otel.spans import decode_spans  # noqa: E402


def test_the_bench_record_gives_a_call_and_a_result_per_tool_span_in_both_encodings():
    doc = build_request(4)
    for encoding in ("otlp_proto", "otlp_json"):
        mapped = map_spans(decode_spans(encode(doc, encoding), encoding, 1 << 23, 100))
        assert [type(e).__name__ for e in mapped.events] == ["ToolCall", "ToolResult"] * 4 and not mapped.rejected


def test_the_bench_reports_both_encodings():
    out = bench_spans(tool_calls=2, records=2, repeat=1)
    assert set(out) >= {"otlp_proto", "otlp_json"} and out["otlp_proto"]["records_per_second"] > 0
