"""The span path's mapping: recorded spans of each attribute family, both encodings, dead letters, bounds.

Fixtures (tests/data/otel/*.otlp.json) are OTLP/JSON trace export requests:
PydanticAI's own spans (GenAI conventions) recorded from a real instrumented
run, and spans under the OpenInference and OpenLLMetry attribute names. Each
is read as ``otlp_json`` and, converted to protobuf, as ``otlp_proto``; both
must give the same events.
"""

from __future__ import annotations

import json

import msgspec
import pytest

pytest.importorskip("opentelemetry.proto")

from loopwarden.otel.ingest import SpanSettings, translate  # noqa: E402
from loopwarden.otel.mapping import SPAN_DEAD_LETTER_REASONS, as_payload, map_spans  # noqa: E402
from loopwarden.otel.spans import SpanDecodeError, decode_spans  # noqa: E402
from loopwarden.schemas.events import decode_event, encode_event, run_key  # noqa: E402
from loopwarden.schemas.verdicts import DeadLetter  # noqa: E402
from tests.otel.otel_helpers import encoded, fixture  # noqa: E402
from tests.support.helpers import Rec  # noqa: E402

ENCODINGS = ("otlp_json", "otlp_proto")
LIMIT = 1 << 23


def events_of(name: str, encoding: str) -> list[dict]:
    mapped = map_spans(decode_spans(encoded(fixture(name), encoding), encoding, LIMIT, 1000))
    assert not mapped.rejected
    return [json.loads(encode_event(e)) for e in mapped.events]


def brief(events: list[dict]) -> list[tuple]:
    return [(e["type"], e.get("tool_name"), e.get("params"), e.get("result"), e.get("error")) for e in events]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_pydantic_ai_spans_genai_conventions(encoding):
    events = events_of("pydantic_ai.otlp.json", encoding)
    call = ("tool_call", "lookup", {"q": "job 42"}, None, None)
    result = ("tool_result", "lookup", {"q": "job 42"}, "status: pending", None)
    assert brief(events) == [call, result] * 3 + [("run_end", None, None, None, None)]
    run = events[0]["run_id"]
    assert {(e["agent_id"], e["session_id"], e["run_id"], e["origin"]) for e in events} == {
        ("poller", "conv-pa-1", run, "otel")
    }
    assert [e["tool_call_id"] for e in events[:6:2]] == ["call_0", "call_1", "call_2"]
    assert len({e["event_id"] for e in events}) == len(events)  # a span sent twice is dropped once applied
    assert all(e["ts"] > 1e9 for e in events)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_an_error_comes_from_the_exception_event(encoding):
    events = events_of("pydantic_ai_error.otlp.json", encoding)
    assert brief(events)[1] == (
        "tool_result",
        "fetch",
        {"url": "https://example.invalid"},
        None,
        "pydantic_ai.exceptions.ToolRetryError: connection refused",
    )


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_openinference_spans(encoding):
    events = events_of("openinference.otlp.json", encoding)
    get = [
        ("tool_call", "get_ticket", {"ticket": 7}, None, None),
        # an object result is published as the model reads it, its JSON text (results.as_shown)
        ("tool_result", "get_ticket", {"ticket": 7}, '{"status":"open"}', None),
    ]
    assert brief(events) == get * 3 + [
        ("tool_call", "close_ticket", {"ticket": 7}, None, None),
        ("tool_result", "close_ticket", {"ticket": 7}, None, "PermissionError: ticket 7 is locked"),
        ("run_end", None, None, None, None),
    ]
    trace = events[0]["run_id"]
    assert len(trace) == 32  # no run id on these spans: the trace is the run
    # a run named by its trace is the trace's, session included (OTEL.md, "Run identity")
    assert {(e["agent_id"], e["session_id"], e["run_id"]) for e in events} == {("support", trace, trace)}
    assert [e.get("tool_call_id") for e in events[:8:2]] == ["call_oi_0", "call_oi_1", "call_oi_2", None]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_openllmetry_spans(encoding):
    events = events_of("openllmetry.otlp.json", encoding)
    # the input's keyword arguments are the call's arguments; the output is JSON text (a JSON string here)
    call = ("tool_call", "search", {"query": "loopwarden"}, None, None)
    result = ("tool_result", "search", {"query": "loopwarden"}, "no results", None)
    assert brief(events) == [call, result] * 2 + [("run_end", None, None, None, None)]
    trace = events[0]["run_id"]
    assert {(e["agent_id"], e["session_id"], e["run_id"]) for e in events} == {("research", trace, trace)}


def test_both_encodings_give_the_same_events():
    for name in ("pydantic_ai.otlp.json", "openinference.otlp.json", "openllmetry.otlp.json"):
        assert events_of(name, "otlp_json") == events_of(name, "otlp_proto"), name


def test_events_decode_as_the_worker_reads_them():
    for e in events_of("openinference.otlp.json", "otlp_proto"):
        assert decode_event(json.dumps(e)).origin == "otel"


def test_without_a_conversation_the_trace_is_session_and_run_and_service_name_the_agent():
    doc = fixture("openllmetry.otlp.json")
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    for span in spans:
        span["attributes"] = [
            a for a in span["attributes"] if not a["key"].startswith(("traceloop.workflow", "traceloop.asso"))
        ]
    events = [
        json.loads(encode_event(e))
        for e in map_spans(decode_spans(encoded(doc, "otlp_json"), "otlp_json", LIMIT, 100)).events
    ]
    trace = spans[0]["traceId"]
    assert {(e["agent_id"], e["session_id"], e["run_id"]) for e in events} == {("langchain-fleet", trace, trace)}


# -- the consumer's translation: keys and dead letters -------------------------------------------


def settings(encoding: str, **kw) -> SpanSettings:
    return SpanSettings(encoding=encoding, events_topic="ev", dead_letter_topic="dlq", **kw)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_events_are_keyed_by_run(encoding):
    out = translate(
        Rec("otlp_spans", 0, 5, None, encoded(fixture("pydantic_ai.otlp.json"), encoding)), settings(encoding)
    )
    assert {o.topic for o in out} == {"ev"}
    for o in out:
        assert o.key == run_key(decode_event(o.value)).encode()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_unmappable_tool_spans_are_dead_lettered_with_their_reason(encoding):
    raw = encoded(fixture("unmappable.otlp.json"), encoding)
    out = translate(Rec("otlp_spans", 2, 9, b"k", raw), settings(encoding))
    assert [o.topic for o in out] == ["dlq"] * 3  # the HTTP span is not a tool span: ignored
    letters = [msgspec.json.decode(o.value, type=DeadLetter) for o in out]
    assert [d.reason for d in letters] == ["otel_no_tool_name", "otel_no_arguments", "otel_field_too_long"]
    assert all((d.topic, d.partition, d.offset) == ("otlp_spans", 2, 9) for d in letters)
    assert all(o.key == b"k" for o in out)
    assert "content capture" in letters[1].detail
    # raw is the span itself, in the record's encoding
    if encoding == "otlp_proto":
        from opentelemetry.proto.trace.v1.trace_pb2 import Span

        assert Span.FromString(letters[1].raw).name == "execute_tool lookup"  # noqa: E501
    else:
        assert json.loads(letters[1].raw)["name"] == "execute_tool lookup"
    assert {d.reason for d in letters} <= set(SPAN_DEAD_LETTER_REASONS)


@pytest.mark.parametrize(
    ("encoding", "raw", "reason"),
    [
        ("otlp_proto", b"\xff\xff\xff not protobuf", "otel_bad_request"),
        ("otlp_json", b"{not json", "otel_bad_request"),
        ("otlp_json", b"[1, 2]", "otel_bad_request"),
        ("otlp_proto", b"", "empty"),
        ("otlp_json", None, "empty"),
    ],
)
def test_records_that_do_not_decode_are_dead_lettered_whole(encoding, raw, reason):
    out = translate(Rec("otlp_spans", 0, 1, None, raw), settings(encoding))
    assert len(out) == 1 and out[0].topic == "dlq"
    letter = msgspec.json.decode(out[0].value, type=DeadLetter)
    assert letter.reason == reason and letter.raw == (raw or b"")


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_size_and_span_count_are_bounded_before_mapping(encoding):
    raw = encoded(fixture("pydantic_ai.otlp.json"), encoding)
    out = translate(Rec("t", 0, 0, None, raw), settings(encoding, max_request_bytes=len(raw) - 1))
    assert msgspec.json.decode(out[0].value, type=DeadLetter).reason == "too_large"
    with pytest.raises(SpanDecodeError) as err:
        decode_spans(raw, encoding, LIMIT, max_spans=3)
    assert err.value.reason == "otel_too_many_spans"


def test_large_payloads_become_a_digest_that_still_tells_them_apart():
    big_a, big_b = "a" * 70_000, "b" * 70_000
    assert as_payload(big_a, 65_536) == as_payload(big_a, 65_536)
    assert as_payload(big_a, 65_536) != as_payload(big_b, 65_536)
    assert len(bytes(as_payload(big_a, 65_536))) < 200
    assert json.loads(bytes(as_payload('{"a": 1}', 100))) == {"a": 1}
    assert json.loads(bytes(as_payload("[1, 2", 100))) == "[1, 2"  # not JSON: a string
    deep = "[" * 100 + "]" * 100
    assert json.loads(bytes(as_payload(deep, 1000))) == deep  # deeper than the worker reads: kept as text
    assert json.loads(bytes(as_payload("42", 100))) == "42"  # text that is not an object/array stays text
    assert json.loads(bytes(as_payload("42", 100, json_text=True))) == 42


def test_hostile_attribute_values_are_bounded():
    def nested(depth: int) -> dict:
        value: dict = {"stringValue": "leaf"}
        for _ in range(depth):
            value = {"arrayValue": {"values": [value]}}
        return value

    doc = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "0" * 31 + "1",
                                "spanId": "0" * 15 + "2",
                                "name": "execute_tool t",
                                "attributes": [
                                    {"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}},
                                    {"key": "gen_ai.tool.name", "value": {"stringValue": "t"}},
                                    {"key": "gen_ai.tool.call.arguments", "value": nested(30)},
                                    {"key": "ignored", "value": nested(30)},
                                    {
                                        "key": "gen_ai.tool.call.result",
                                        "value": {"arrayValue": {"values": [{"intValue": "7"}] * 5000}},
                                    },
                                ],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    for encoding in ENCODINGS:
        (span,) = decode_spans(encoded(doc, encoding), encoding, LIMIT, 10)
        assert "ignored" not in span.attributes
        depth, value = 0, span.attributes["gen_ai.tool.call.arguments"]
        while isinstance(value, list) and value:
            depth, value = depth + 1, value[0]
        assert depth == 8  # deeper levels are cut
        assert span.attributes["gen_ai.tool.call.result"] == [7] * 1024
        call, result = map_spans([span]).events
        assert json.loads(bytes(result.result)) == [7] * 1024


def test_spans_of_one_request_are_ordered_by_time_calls_at_start_results_at_end():
    doc = fixture("pydantic_ai.otlp.json")
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.reverse()  # the order in the request does not matter, the spans' times do
    events = map_spans(decode_spans(encoded(doc, "otlp_json"), "otlp_json", LIMIT, 100)).events
    assert [type(e).__name__ for e in events] == ["ToolCall", "ToolResult"] * 3 + ["RunEnd"]
    assert [e.tool_call_id for e in events[:6:2]] == ["call_0", "call_1", "call_2"]


def test_redacted_arguments_are_no_arguments():
    doc = fixture("openinference.otlp.json")
    for span in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for a in span["attributes"]:
            if a["key"] == "input.value":
                a["value"] = {"stringValue": "__REDACTED__"}  # OPENINFERENCE_HIDE_INPUTS=true
    mapped = map_spans(decode_spans(encoded(doc, "otlp_json"), "otlp_json", LIMIT, 100))
    assert [r.reason for r in mapped.rejected] == ["otel_no_arguments"] * 4
    assert [type(e).__name__ for e in mapped.events] == ["RunEnd"]


def test_google_adk_arguments_and_response():
    doc = fixture("pydantic_ai.otlp.json")
    for span in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for a in span["attributes"]:
            a["key"] = {
                "gen_ai.tool.call.arguments": "gcp.vertex.agent.tool_call_args",
                "gen_ai.tool.call.result": "gcp.vertex.agent.tool_response",
            }.get(a["key"], a["key"])
    assert brief(events_of_doc(doc))[:2] == brief(events_of("pydantic_ai.otlp.json", "otlp_json"))[:2]


def events_of_doc(doc: dict) -> list[dict]:
    return [
        json.loads(encode_event(e))
        for e in map_spans(decode_spans(encoded(doc, "otlp_json"), "otlp_json", LIMIT, 100)).events
    ]


def test_the_documented_dead_letter_reasons_are_the_ones_used():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "streams" / "otel" / "OTEL.md").read_text()
    section = doc.split("## Dead letters", 1)[1]
    rows = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert rows == ["unreadable", "empty", "too_large", *SPAN_DEAD_LETTER_REASONS, "engine_error"]


def test_otlp_json_values_of_the_wrong_type_are_not_taken():
    doc = fixture("pydantic_ai.otlp.json")
    for span in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for a in span["attributes"]:
            if a["key"] == "gen_ai.tool.name":
                a["value"] = {"stringValue": {"nested": [[[["deep"]]]]}}
    mapped = map_spans(decode_spans(encoded(doc, "otlp_json"), "otlp_json", LIMIT, 100))
    # the span names its tool in its name too: the attribute of the wrong type is ignored, not used
    assert {getattr(e, "tool_name", None) for e in mapped.events} == {"lookup", None}
    span = next(
        s for s in decode_spans(encoded(doc, "otlp_json"), "otlp_json", LIMIT, 100) if s.name.startswith("execute")
    )
    assert span.attributes["gen_ai.tool.name"] is None


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_only_tool_and_agent_spans_are_kept_but_all_count_against_the_limit(encoding):
    from loopwarden.otel.mapping import relevant

    raw = encoded(fixture("pydantic_ai.otlp.json"), encoding)
    every = decode_spans(raw, encoding, LIMIT, 100)
    kept = decode_spans(raw, encoding, LIMIT, 100, keep=relevant)
    assert [s.name for s in kept] == [s.name for s in every if not s.name.startswith("chat")]
    assert len(kept) == 4 < len(every) == 8
    with pytest.raises(SpanDecodeError):
        decode_spans(raw, encoding, LIMIT, 7, keep=relevant)


def _tool_span(attributes: dict):
    from loopwarden.otel.spans import Span

    return Span(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        parent_span_id="",
        name="execute_tool lookup",
        start_ns=1,
        end_ns=2,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", **attributes},
        status_code=0,
        status_message="",
        events=[],
        resource={},
    )


def test_wrappers_are_taken_off_only_for_the_families_that_wrap():
    from loopwarden.otel.mapping import map_tool_span

    message = '{"type": "tool", "data": {"content": "x", "tool_call_id": "c1"}}'
    payload = '{"input_str": "q", "inputs": {"q": "job"}, "kwargs": {"tool_call_id": "c1"}}'
    plain = map_tool_span(_tool_span({"gen_ai.tool.call.arguments": payload, "gen_ai.tool.call.result": message}))
    # a GenAI span (PydanticAI, contrib): a tool may return such JSON itself; taken as it is
    assert json.loads(bytes(plain.call.params)) == json.loads(payload)
    shown = json.loads(bytes(plain.result.result))  # an object result: its JSON text (results.as_shown)
    assert json.loads(shown) == json.loads(message) and plain.call.tool_call_id is None
    wrapped = map_tool_span(
        _tool_span(
            {"traceloop.span.kind": "tool", "gen_ai.tool.call.arguments": payload, "gen_ai.tool.call.result": message}
        )
    )
    assert json.loads(bytes(wrapped.call.params)) == {"q": "job"}
    assert json.loads(bytes(wrapped.result.result)) == "x" and wrapped.call.tool_call_id == "c1"


def test_text_taken_out_of_a_tool_message_stays_text():
    from loopwarden.otel.mapping import map_tool_span

    message = '{"type": "tool", "data": {"content": "42", "tool_call_id": "c1"}}'
    attributes = {
        "openinference.span.kind": "TOOL",
        "input.value": '{"q": "x"}',
        "input.mime_type": "application/json",
        "output.value": message,
        "output.mime_type": "application/json",
    }
    mapped = map_tool_span(_tool_span(attributes))
    assert json.loads(bytes(mapped.result.result)) == "42"  # a runner sends the tool's text: a string


def test_a_changing_object_result_is_a_changing_outcome():
    """A tool returning a plain object (``{"progress": n}``) hashed alike whatever it held (OpenClaw hashes an
    object on ``details``/``content`` only), so spans of a healthy poll read as identical outcomes and a
    shadow block followed; mapped as the adapters publish it (its JSON text), each answer is its own."""
    from loopwarden.detection.engine import outcome_hash
    from loopwarden.otel.mapping import map_tool_span

    def hashed(result: str) -> str | None:
        span = _tool_span({"gen_ai.tool.call.arguments": '{"job": 7}', "gen_ai.tool.call.result": result})
        return outcome_hash(map_tool_span(span).result)

    assert hashed('{"progress": 1}') != hashed('{"progress": 2}')
    assert hashed('{"progress": 1}') == hashed('{"progress":1}')
