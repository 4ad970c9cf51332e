"""``loopwarden bench spans``: records/second through ``loopwarden spans``' translation, against parsing alone.

A synthetic trace export request shaped like an instrumented agent's: per
tool call a model-call span carrying the conversation so far (the bulk of a
real record) and an ``execute_tool`` span with arguments and a result, under
the GenAI conventions. Timed on one core: the request parsed alone (the
floor: protobuf for ``otlp_proto``, JSON for ``otlp_json``), then
:func:`loopwarden.otel.ingest.translate` (decode, map, encode the events).
"""

from __future__ import annotations

import json
import time

import msgspec


def build_request(tool_calls: int, seed: int = 1) -> dict:
    """An OTLP/JSON trace export request (ids in hex) with ``tool_calls`` tool spans."""
    trace = f"{seed:032x}"
    spans = []
    history: list[dict] = []
    t = 1_700_000_000_000_000_000

    def attrs(**kv: str) -> list[dict]:
        return [{"key": k.replace("__", "."), "value": {"stringValue": v}} for k, v in kv.items()]

    common = {"gen_ai__agent__name": "bench-agent", "gen_ai__conversation__id": f"conv-{seed}"}
    for i in range(tool_calls):
        history.append({"role": "assistant", "parts": [{"type": "tool_call", "name": "lookup", "id": f"c{i}"}]})
        history.append({"role": "tool", "parts": [{"type": "text", "content": f"status of job {i % 7}: pending"}]})
        spans.append(
            {
                "traceId": trace,
                "spanId": f"{2 * i + 1:016x}",
                "parentSpanId": f"{10**9:016x}",
                "name": "chat bench-model",
                "startTimeUnixNano": str(t),
                "endTimeUnixNano": str(t + 1000),
                "attributes": attrs(
                    gen_ai__operation__name="chat", gen_ai__input__messages=json.dumps(history), **common
                ),
            }
        )
        spans.append(
            {
                "traceId": trace,
                "spanId": f"{2 * i + 2:016x}",
                "parentSpanId": f"{10**9:016x}",
                "name": "execute_tool lookup",
                "startTimeUnixNano": str(t + 2000),
                "endTimeUnixNano": str(t + 3000),
                "attributes": attrs(
                    gen_ai__operation__name="execute_tool",
                    gen_ai__tool__name="lookup",
                    gen_ai__tool__call__id=f"c{i}",
                    gen_ai__tool__call__arguments=json.dumps({"job": i % 7}),
                    gen_ai__tool__call__result=f"status of job {i % 7}: pending",
                    **common,
                ),
            }
        )
        t += 10_000
    resource = {"attributes": attrs(service__name="bench")}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]}


def encode(doc: dict, encoding: str) -> bytes:
    if encoding == "otlp_json":
        return json.dumps(doc).encode()
    import base64

    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    def b64(obj):
        if isinstance(obj, dict):
            return {
                k: base64.b64encode(bytes.fromhex(v)).decode() if k in ("traceId", "spanId", "parentSpanId") else b64(v)
                for k, v in obj.items()
            }
        return [b64(v) for v in obj] if isinstance(obj, list) else obj

    return ParseDict(b64(doc), ExportTraceServiceRequest()).SerializeToString()


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_spans(tool_calls: int, records: int, repeat: int) -> dict:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from loopwarden.otel.ingest import SpanSettings, translate

    class Rec(msgspec.Struct):
        topic: str
        partition: int
        offset: int
        key: bytes | None
        value: bytes

    out: dict = {"tool_spans_per_record": tool_calls, "spans_per_record": 2 * tool_calls, "records": records}
    for encoding in ("otlp_proto", "otlp_json"):
        raw = encode(build_request(tool_calls), encoding)
        settings = SpanSettings(encoding=encoding)
        recs = [Rec("otlp_spans", 0, i, None, raw) for i in range(records)]
        if encoding == "otlp_proto":

            def parse(recs: list = recs) -> None:
                for r in recs:
                    ExportTraceServiceRequest.FromString(r.value)
        else:

            def parse(recs: list = recs) -> None:
                for r in recs:
                    msgspec.json.decode(r.value)

        def full(recs: list = recs, settings: SpanSettings = settings) -> None:
            for r in recs:
                translate(r, settings)

        floor, total = _best(parse, repeat), _best(full, repeat)
        out[encoding] = {
            "record_bytes": len(raw),
            "parse_only_records_per_second": round(records / floor),
            "records_per_second": round(records / total),
            "tool_spans_per_second": round(records * tool_calls / total),
            "ratio_to_parse_only": round(total / floor, 1),
        }
    return out


def add_arguments(p) -> None:
    p.add_argument("--tool-calls", type=int, default=50, help="tool spans per record (plus as many model spans)")
    p.add_argument("--records", type=int, default=200)
    p.add_argument("--repeat", type=int, default=3, help="timed runs; the best is reported")


def run(args) -> int:
    print(msgspec.json.format(msgspec.json.encode(bench_spans(args.tool_calls, args.records, args.repeat))).decode())
    return 0
