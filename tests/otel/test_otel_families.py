"""Each instrumentation family's real spans give the verdicts of the same agents' native events.

Five scripted agents (stuck, ping-pong, ping-pong between a two-argument and a
one-argument tool, a poll that makes progress, a healthy one;
``tests/otel/otel_families.py``) run under each family's real
instrumentation package. Their spans, encoded as the Collector's Kafka exporter
writes them, go through ``loopwarden spans``' mapping; the events it makes and
the agents' native events (with the same origin, so both are decided in shadow) both go through
``loopwarden replay``. The verdicts,
warning keys included, must be equal, and each run must end.
"""

from __future__ import annotations

import json
from functools import cache

import pytest

pytest.importorskip("opentelemetry.sdk")

from loopwarden.otel.ingest import SpanCounts, SpanSettings, translate  # noqa: E402
from loopwarden.replay import replay_lines  # noqa: E402
from loopwarden.schemas.config import FleetConfig  # noqa: E402
from loopwarden.schemas.events import decode_event, encode_event  # noqa: E402
from tests.otel import otel_families as fam  # noqa: E402
from tests.support.helpers import Rec  # noqa: E402

pytestmark = pytest.mark.slow  # about 30 s: it imports and runs five frameworks

CONFIG = FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}})  # OpenClaw's defaults
FAMILIES = {
    "openinference_langchain": ("openinference.instrumentation.langchain", fam.openinference_langchain),
    "openllmetry_langchain": ("opentelemetry.instrumentation.langchain", fam.openllmetry_langchain),
    "openinference_openai_agents": ("openinference.instrumentation.openai_agents", fam.openinference_openai_agents),
    "pydantic_ai": ("pydantic_ai", fam.pydantic_ai_own),
    "google_adk": ("google.adk", fam.google_adk_own),
}


@cache
def spans_of(family: str) -> dict[str, bytes]:
    """Each agent's spans as the exporter's record (OpenLLMetry's captured in a fresh interpreter: its
    uninstrument() leaves a callback handler behind)."""
    module, capture = FAMILIES[family]
    pytest.importorskip(module)
    if capture is fam.openllmetry_langchain:
        return fam.encoded_in_subprocess(capture.__name__, sorted(fam.AGENTS))
    return {name: fam.encoded(spans) for name, spans in capture(fam.AGENTS).items()}


def mapped_lines(spans: list | bytes, counts: SpanCounts | None = None) -> list[str]:
    raw = spans if isinstance(spans, bytes) else fam.encoded(spans)
    record = Rec("otlp_spans", 0, 0, None, raw)
    out = translate(record, SpanSettings(), counts)
    assert all(o.topic == "agent.events" for o in out), [o.value[:300] for o in out if o.topic != "agent.events"]
    return [o.value.decode() for o in out]


def verdicts(lines: list[str]) -> list[tuple]:
    keep = ("level", "detector", "count", "warning_key", "tool_name", "paired_tool_name", "emitted", "action")
    return [tuple(r.get(k) for k in keep) for r in replay_lines(lines, CONFIG)]


EXPECTED = {  # what the native events give (checked below as well): the agents are what they say
    "stuck": {("generic_repeat", "warning", 10), ("generic_repeat", "critical", 20)},
    "ping_pong": {("ping_pong", "warning", 10), ("ping_pong", "critical", 20), ("ping_pong", "critical", 21)},
    "mixed": {("ping_pong", "warning", 10), ("ping_pong", "critical", 20), ("ping_pong", "critical", 21)},
    "poll": set(),
    "healthy": set(),
}


@pytest.mark.parametrize("agent", sorted(fam.AGENTS))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_spans_give_the_native_verdicts(family, agent):
    # the native events decided as the spans' are, in shadow: a runner would have stopped the agent at a block
    native = verdicts(fam.native_events(fam.AGENTS[agent], origin="otel"))
    assert {(v[1], v[0], v[2]) for v in native if v[6]} == EXPECTED[agent]
    counts = SpanCounts()
    lines = mapped_lines(spans_of(family)[agent], counts)
    events = [json.loads(line) for line in lines]
    calls = [e for e in events if e["type"] == "tool_call"]
    assert [(c["tool_name"], c["params"]) for c in calls] == [(s.tool, s.args) for s in fam.AGENTS[agent]]
    results = [e.get("result") for e in events if e["type"] == "tool_result"]
    assert results == [s.result for s in fam.AGENTS[agent]]
    assert verdicts(lines) == native
    assert not counts.inexact and not counts.dead


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_run_is_one_run_and_ends(family):
    """Every event of an agent's run names one run (agent, session, run), and the run ends once."""
    for agent, spans in spans_of(family).items():
        events = [json.loads(line) for line in mapped_lines(spans)]
        runs = {(e["agent_id"], e.get("session_id"), e.get("run_id")) for e in events}
        assert len(runs) == 1, (agent, runs)
        assert [e["type"] for e in events].count("run_end") == 1 and events[-1]["type"] == "run_end", agent
        assert all(e["origin"] == "otel" for e in events)


@pytest.mark.parametrize("agent", ["mixed", "ping_pong", "healthy"])
def test_openinference_langchain_spans_exported_apart(agent):
    """The exporter's batches can end anywhere: here each span is its own record, in the order the spans end,
    so a tool span comes before its tools node (which lists the call's arguments). The model's span,
    ended before the tool ran, announced them: every call keeps the model's arguments (a one-argument tool's
    span alone has only the bare value), and the verdicts are the native events'."""
    pytest.importorskip("openinference.instrumentation.langchain")
    from loopwarden.otel.mapping import Announced

    script = fam.AGENTS[agent]
    spans = fam.openinference_langchain({agent: script})[agent]
    counts, announced, lines = SpanCounts(), Announced(), []
    for i, span in enumerate(spans):
        record = Rec("otlp_spans", 0, i, None, fam.encoded([span]))
        out = translate(record, SpanSettings(), counts, announced)
        assert all(o.topic == "agent.events" for o in out)
        lines += [o.value.decode() for o in out]
    calls = [json.loads(line) for line in lines if '"type":"tool_call"' in line]
    assert [(c["tool_name"], c["params"]) for c in calls] == [(s.tool, s.args) for s in script]
    assert verdicts(lines) == verdicts(fam.native_events(script, origin="otel"))
    assert not counts.inexact


def test_announced_arguments_are_bounded_and_per_trace():
    """The memory of announced calls keeps at most its bounds (oldest out) and keys by trace and call id, so
    two runs whose models reuse call ids (scripted models do) never lend each other arguments."""
    pytest.importorskip("openinference.instrumentation.langchain")
    from loopwarden.otel.mapping import Announced
    from loopwarden.otel.spans import decode_spans

    spans = fam.openinference_langchain({"a": fam.AGENTS["healthy"], "b": fam.AGENTS["mixed"]})
    memory = Announced(max_calls=5)
    for agent in ("a", "b"):
        for span in decode_spans(fam.encoded(spans[agent]), "otlp_proto", 1 << 24, 10_000):
            memory.add(span, 65_536)
    assert len(memory.args) == 5 and memory.chars == sum(len(v) for v in memory.args.values())
    traces = {trace for trace, _ in memory.args}
    assert len(traces) == 1  # the newest five: all of run b's
    trace_a = decode_spans(fam.encoded(spans["a"]), "otlp_proto", 1 << 24, 10_000)[0].trace_id
    assert memory.get(trace_a, "call_20") is None and memory.get(next(iter(traces)), "call_20") is not None
    tight = Announced(max_chars=40)
    for span in decode_spans(fam.encoded(spans["b"]), "otlp_proto", 1 << 24, 10_000):
        tight.add(span, 65_536)
    assert tight.chars <= 40


def test_two_invocations_in_one_trace():
    """Two agent runs under one request trace (OpenInference, LangChain): the trace is the run, so their
    calls pool into one run; the run ends at the trace's root span only. Said in OTEL.md."""
    pytest.importorskip("openinference.instrumentation.langchain")
    from tests.otel.otel_helpers import Recorder

    two = {"first": fam.AGENTS["healthy"], "second": fam.AGENTS["healthy"]}
    rec = Recorder("langchain-fleet")
    tracer = rec.provider.get_tracer("request")
    with tracer.start_as_current_span("POST /chat"):  # the request's span: both graphs run under it
        spans = fam.openinference_langchain(two)
    lines = mapped_lines([s for agent in spans.values() for s in agent])
    events = [json.loads(line) for line in lines]
    assert len({e["run_id"] for e in events}) == 1
    assert [e["type"] for e in events].count("tool_call") == 2 * len(fam.AGENTS["healthy"])
    assert [e["type"] for e in events].count("run_end") == 0  # neither graph's span is the trace's root


def test_encoded_events_round_trip():
    lines = mapped_lines(spans_of("pydantic_ai")["poll"])
    assert [encode_event(decode_event(line)).decode() for line in lines] == lines


@pytest.mark.parametrize("agent", sorted(fam.AGENTS))
def test_openclaw_with_tool_content_captured(agent):
    """OpenClaw's attribute set (hand-written from its documentation: its exporter is a plugin not installed
    here) with ``captureContent`` on: exact."""
    spans = fam.openclaw_attribute_set({agent: fam.AGENTS[agent]}, capture_content=True)[agent]
    native = verdicts(fam.native_events(fam.AGENTS[agent], origin="otel"))
    lines = mapped_lines(spans)
    assert verdicts(lines) == native
    events = [json.loads(line) for line in lines]
    assert events[-1]["type"] == "run_end" and len({(e["agent_id"], e["run_id"]) for e in events}) == 1


def test_a_family_without_arguments_is_said_once_and_counted(caplog):
    """OpenClaw's default export has no arguments: each tool span is dead-lettered, counted as inexact for
    the family, and the log says so once."""
    spans = fam.openclaw_attribute_set({"stuck": fam.AGENTS["stuck"]}, capture_content=False)["stuck"]
    counts = SpanCounts()
    record = Rec("otlp_spans", 0, 0, None, fam.encoded(spans))
    with caplog.at_level("WARNING", logger="loopwarden.otel.ingest"):
        out = translate(record, SpanSettings(), counts) + translate(record, SpanSettings(), counts)
    assert counts.dead["otel_no_arguments"] == counts.inexact["openclaw:no_arguments"] == 2 * 21
    assert [o.topic for o in out].count("agent.events") == 2  # the run still ends
    said = [r.getMessage() for r in caplog.records if "openclaw" in r.getMessage()]
    assert len(said) == 1 and "no arguments" in said[0]


def test_a_bare_argument_without_its_listed_call_is_counted():
    """An OpenInference LangChain tool span whose tools-node span and model span were never read (another
    consumer's, or before a restart): its arguments are the bare value (not the runner's), counted for the
    family."""
    spans = fam.openinference_langchain({"healthy": fam.AGENTS["healthy"]})["healthy"]
    spans = [s for s in spans if s.name != "tools" and s.attributes.get("openinference.span.kind") != "LLM"]
    counts = SpanCounts()
    events = [json.loads(line) for line in mapped_lines(spans, counts)]
    assert counts.inexact["openinference:bare_arguments"] == len(fam.AGENTS["healthy"])
    assert [e["params"] for e in events if e["type"] == "tool_call"][:2] == ["item 0", "item 1"]
