"""Zero-code monitoring end to end: a looping PydanticAI agent instrumented only with OpenTelemetry.

Its spans, recorded by the OpenTelemetry SDK and encoded as OTLP protobuf by
the OTLP exporters' encoder (what the Collector's Kafka exporter writes), are
produced to a span topic on Tansu; ``loopwarden spans`` (a real subprocess)
turns them into events for a real worker with fleet incidents on. Checked:

- the worker's verdicts are on the shadow topic only, marked ``shadow`` and
  ``origin: "otel"``, and equal ``loopwarden replay`` over the events the span
  adapter sent;
- they are the detections the native PydanticAI adapter's events would give
  in shadow mode (the documented limit: a run seen through spans is only
  watched, and each loop is seen after its calls ended);
- the detection is on the worker's ``/metrics`` with its detector (what the
  dashboard plots), and the two looping agents join one fleet incident;
- a record that is not a trace export is dead-lettered.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid

import pytest

pytest.importorskip("opentelemetry.proto")
pytest.importorskip("opentelemetry.exporter.otlp.proto.common")
pytest.importorskip("pydantic_ai")

from pydantic_ai.messages import ToolCallPart, ToolReturnPart  # noqa: E402

from loopwarden.otel.ingest import SpanSettings, translate  # noqa: E402
from loopwarden.replay import replay_lines  # noqa: E402
from loopwarden.schemas.config import FleetConfig  # noqa: E402
from tests.otel.otel_helpers import Recorder, export_request, looping_agent  # noqa: E402
from tests.support.helpers import Rec  # noqa: E402
from tests.support.live import REPO, collect, decode_verdicts, produce, ready_worker  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CALLS = 25  # OpenClaw's defaults: a warning at 10 identical calls, critical at 20
INCIDENTS = {"enabled": True, "minStreak": 3, "minRuns": 2, "minAgents": 2, "window": 600, "samples": True}
CONFIG = {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"incidents": INCIDENTS}}
FIELDS = (
    "detector",
    "level",
    "count",
    "action",
    "message",
    "warning_key",
    "tool_name",
    "agent_id",
    "session_id",
    "run_id",
)


@pytest.fixture(scope="module")
def worker(tansu, tmp_path_factory):
    yield from ready_worker(tansu, tmp_path_factory.mktemp("otel-worker"), "otel", CONFIG)


class SpansProcess:
    """``loopwarden spans`` as a child process, stopped by SIGTERM."""

    def __init__(self, tansu: str, worker, spans_topic: str, log_path, encoding: str = "otlp_proto") -> None:
        names = worker.names
        self.args = [
            sys.executable,
            "-m",
            "loopwarden.cli",
            "spans",
            "--bootstrap",
            tansu,
            "--spans-topic",
            spans_topic,
            "--events-topic",
            names.events,
            "--dead-letter-topic",
            names.dead_letter,
            "--group-id",
            f"spans-{uuid.uuid4().hex[:8]}",
            "--start",
            "earliest",
            "--encoding",
            encoding,
        ]
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.args, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, env=os.environ)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        finally:
            self.log.close()


def run_agent(name: str, conversation: str) -> tuple[bytes, object]:
    """One looping run; its spans as one OTLP protobuf export request, and the run's result."""
    recorder = Recorder(f"{name}-service")
    result = looping_agent(recorder, CALLS, {"q": "job 42"}, name=name).run_sync("poll", conversation_id=conversation)
    return export_request(recorder.take()).SerializeToString(), result


def native_events(name: str, result) -> list[dict]:
    """What loopwarden's PydanticAI adapter (LoopwardenCapability) publishes for the same run."""
    ref = {"agent_id": name, "session_id": result.conversation_id, "run_id": result.run_id}
    returns = {
        p.tool_call_id: p.content for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)
    }
    out = []
    for m in result.all_messages():
        for p in m.parts:
            if isinstance(p, ToolCallPart):
                base = {**ref, "tool_name": p.tool_name, "tool_call_id": p.tool_call_id, "params": p.args_as_dict()}
                out += [
                    {"type": "tool_call", **base},
                    {"type": "tool_result", **base, "result": returns[p.tool_call_id]},
                ]
    return out + [{"type": "run_end", **ref}]


def rows(lines: list[str], config: FleetConfig) -> list[dict]:
    return [r for r in replay_lines(lines, config) if isinstance(r, dict) and r["emitted"]]


def test_a_looping_agent_seen_only_through_its_spans(tansu, worker, tmp_path):
    names = worker.names
    spans_topic = f"otlp_spans-{uuid.uuid4().hex[:8]}"
    agents = [("poller-a", f"conv-{uuid.uuid4().hex[:8]}"), ("poller-b", f"conv-{uuid.uuid4().hex[:8]}")]
    runs = [run_agent(name, conv) for name, conv in agents]
    garbage = b"\x0a\xff\xff\xff\xff definitely not a trace export"
    records = [(None, garbage)] + [(None, raw) for raw, _ in runs]
    asyncio.run(produce(tansu, spans_topic, records))

    spans = SpansProcess(tansu, worker, spans_topic, tmp_path / "spans.log")
    try:
        # the events the adapter sends, as its own pure translation gives them
        settings = SpanSettings(events_topic=names.events, dead_letter_topic=names.dead_letter)
        sent = [o for i, (_, raw) in enumerate(records) for o in translate(Rec(spans_topic, 0, i, None, raw), settings)]
        events = [o.value.decode() for o in sent if o.topic == names.events]
        assert len(events) == 2 * (2 * CALLS + 1)
        expected = rows(events, FleetConfig.from_document(CONFIG))
        assert expected

        shadow = decode_verdicts(collect(tansu, names.shadow, lambda recs: len(recs) >= len(expected), timeout=90))
        got = [v for _, v in shadow]
        assert len(got) == len(expected)
        assert all(v["shadow"] is True and v["origin"] == "otel" for v in got)
        for run in {r["run_id"] for r in expected}:
            mine = [v for v in got if v["run_id"] == run]
            assert [[v[f] for f in FIELDS] for v in mine] == [
                [r.get(f) for f in FIELDS] for r in expected if r["run_id"] == run
            ]

        # the same detections as the native adapter's events, in shadow (a span's run is only watched)
        shadowed = FleetConfig.from_document({**CONFIG, "loopwarden": {**CONFIG["loopwarden"], "shadow": True}})
        for (name, _conv), (_raw, result) in zip(agents, runs):
            native = rows([json.dumps(e) for e in native_events(name, result)], shadowed)
            mine = [v for v in got if v["run_id"] == result.run_id]
            assert [[v[f] for f in FIELDS] for v in mine] == [[r.get(f) for f in FIELDS] for r in native]
        assert {(v["detector"], v["level"]) for v in got} == {
            ("generic_repeat", "warning"),
            ("generic_repeat", "critical"),
        }

        # nothing enforced: the control topic stays silent
        assert not decode_verdicts(collect(tansu, names.control, idle=1.0, timeout=5))

        # the dashboard's series: detections by detector, in shadow mode
        worker.wait_metric("loopwarden_detections_total", len(expected))
        metrics = worker.metrics()
        critical = [
            v
            for k, v in metrics.items()
            if k.startswith("loopwarden_detections_total{")
            and 'detector="generic_repeat"' in k
            and 'level="critical"' in k
            and 'mode="shadow"' in k
        ]
        assert sum(critical) >= CALLS - 20 + 1

        # the two agents' runs join one fleet incident
        incidents = collect(
            tansu,
            names.incidents,
            lambda recs: any(json.loads(r.value).get("state") == "open" for r in recs),
            timeout=60,
        )
        opened = [json.loads(r.value) for r in incidents if json.loads(r.value).get("state") == "open"]
        assert len(opened) == 1
        assert set(opened[0]["agent_ids"]) == {"poller-a", "poller-b"}
        assert set(opened[0]["run_keys"]) == {result.run_id for _raw, result in runs}
        assert opened[0]["tool_name"] == "lookup" and opened[0]["sample"] == '"status: pending"'
        worker.wait_metric("loopwarden_incidents_total", 1)

        # the record that was not a trace export
        dead = [json.loads(r.value) for r in collect(tansu, names.dead_letter, lambda recs: len(recs) >= 1, timeout=30)]
        assert [d["reason"] for d in dead] == ["otel_bad_request"]
        assert dead[0]["topic"] == spans_topic
    finally:
        assert spans.stop() == 0


def test_otlp_json_records_give_the_same_verdicts(tansu, worker, tmp_path):
    """The exporter's other encoding, end to end: the shadow verdicts of one run equal replay's."""
    from tests.otel.otel_helpers import to_otlp_json

    names = worker.names
    spans_topic = f"otlp_spans-{uuid.uuid4().hex[:8]}"
    recorder = Recorder("json-service")
    result = looping_agent(recorder, 12, {"q": "job 7"}, result="still pending", name="poller-json").run_sync(
        "poll", conversation_id=f"conv-{uuid.uuid4().hex[:8]}"
    )
    raw = json.dumps(to_otlp_json(export_request(recorder.take()))).encode()
    asyncio.run(produce(tansu, spans_topic, [(None, raw)]))
    spans = SpansProcess(tansu, worker, spans_topic, tmp_path / "spans.log", encoding="otlp_json")
    try:
        settings = SpanSettings(encoding="otlp_json", events_topic=names.events)
        events = [o.value.decode() for o in translate(Rec(spans_topic, 0, 0, None, raw), settings)]
        expected = rows(events, FleetConfig.from_document(CONFIG))
        assert [(r["detector"], r["level"], r["count"]) for r in expected] == [("generic_repeat", "warning", 10)]

        def mine(recs) -> list[dict]:
            return [v for _, v in decode_verdicts(recs) if v["run_id"] == result.run_id]

        got = mine(collect(tansu, names.shadow, lambda recs: len(mine(recs)) >= len(expected), timeout=90))
        assert [[v[f] for f in FIELDS] for v in got] == [[r.get(f) for f in FIELDS] for r in expected]
        assert all(v["origin"] == "otel" and v["shadow"] is True for v in got)
    finally:
        assert spans.stop() == 0


def victim_spans(agent: str, session: str, run: str, calls: int, end: bool = False) -> bytes:
    """Spans naming a runner's agent, session and run (GenAI conventions, PydanticAI's run id attribute):
    ``calls`` identical tool spans, or with ``end`` one ``invoke_agent`` span that ends the run."""
    recorder = Recorder("attacker")
    tracer = recorder.provider.get_tracer("attacker")
    ids = {"gen_ai.agent.name": agent, "gen_ai.conversation.id": session, "gen_ai.agent.call.id": run}
    for i in range(calls):
        with tracer.start_as_current_span("execute_tool read") as span:
            span.set_attributes(
                {
                    **ids,
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "read",
                    "gen_ai.tool.call.id": f"fake_{i}",
                    "gen_ai.tool.call.arguments": '{"path": "a.txt"}',
                    "gen_ai.tool.call.result": "same",
                }
            )
    if end:
        with tracer.start_as_current_span("invoke_agent") as span:
            span.set_attributes({**ids, "gen_ai.operation.name": "invoke_agent"})
    return export_request(recorder.take()).SerializeToString()


def runner_events(agent: str, session: str, run: str, first: int, last: int, call_only_last: bool = False):
    """A runner's own events (no origin) for identical calls ``first`` .. ``last - 1``, keyed by run."""
    from loopwarden.schemas.events import key_for

    key = key_for(agent, session, run).encode()
    out = []
    for i in range(first, last):
        base = {"agent_id": agent, "session_id": session, "run_id": run, "tool_name": "read", "tool_call_id": f"c{i}"}
        base["params"] = {"path": "a.txt"}
        out.append((key, json.dumps({"type": "tool_call", **base}).encode()))
        if not (call_only_last and i == last - 1):
            out.append((key, json.dumps({"type": "tool_result", **base, "result": "same"}).encode()))
    return out


def test_spans_naming_a_runner_run_cannot_steer_it(tansu, worker, tmp_path):
    """The security review's two attacks, live: 20 tool spans naming a runner's agent and run made that run's
    first real call an enforced block; one invoke_agent span wiped a looping run's history. Spans' runs have
    a state of their own: the first call is its run's first, and the looping run is blocked at its 21st call."""
    names = worker.names
    spans_topic = f"otlp_spans-{uuid.uuid4().hex[:8]}"
    first_run, looping_run = f"run-{uuid.uuid4().hex[:8]}", f"run-{uuid.uuid4().hex[:8]}"

    def on_events(run: str, n: int):
        def until(recs) -> bool:
            return sum(1 for r in recs if json.loads(r.value).get("run_id") == run) >= n

        return until

    spans = SpansProcess(tansu, worker, spans_topic, tmp_path / "spans.log")
    try:
        # attack 1: 20 spans naming the run, delivered as events, then the runner's first call
        asyncio.run(produce(tansu, spans_topic, [(None, victim_spans("victim", "s1", first_run, 20))]))
        collect(tansu, names.events, on_events(first_run, 40), idle=0.5, timeout=60)
        asyncio.run(produce(tansu, names.events, runner_events("victim", "s1", first_run, 0, 1, call_only_last=True)))
        # attack 2: a looping run warned at 10; a span ends "it"; the loop goes on to its 21st call
        asyncio.run(produce(tansu, names.events, runner_events("victim", "s2", looping_run, 0, 15)))
        asyncio.run(produce(tansu, spans_topic, [(None, victim_spans("victim", "s2", looping_run, 0, end=True))]))
        collect(tansu, names.events, on_events(looping_run, 31), idle=0.5, timeout=60)
        asyncio.run(produce(tansu, names.events, runner_events("victim", "s2", looping_run, 15, 21, True)))

        def blocked(recs) -> bool:
            return any(v.get("run_id") == looping_run and v["action"] == "block" for _, v in decode_verdicts(recs))

        control = [v for _, v in decode_verdicts(collect(tansu, names.control, blocked, timeout=90))]
        assert [(v["action"], v["count"]) for v in control if v["run_id"] == looping_run] == [
            ("warn", 10),
            ("block", 20),
        ]
        assert [v for v in control if v["run_id"] == first_run] == []  # its first call: nothing to enforce
        assert all(v.get("origin") is None for v in control)
        # the spans' own run was watched: its verdicts are on the shadow topic only
        shadow = [v for _, v in decode_verdicts(collect(tansu, names.shadow, idle=1.0, timeout=30))]
        assert {(v["detector"], v["level"], v["count"]) for v in shadow if v["run_id"] == first_run} == {
            ("generic_repeat", "warning", 10)
        }
        assert all(v["origin"] == "otel" for v in shadow if v["run_id"] in (first_run, looping_run))
    finally:
        assert spans.stop() == 0


def test_real_langchain_spans_through_a_worker(tansu, worker, tmp_path):
    """OpenLLMetry's LangChain instrumentation (the family whose stuck agent got no verdict before): a stuck
    agent's real spans, through ``loopwarden spans`` and the worker, give the native events' verdicts; its run
    ends (the run end and the tool events name one run)."""
    pytest.importorskip("opentelemetry.instrumentation.langchain")
    from tests.otel import otel_families as fam

    names = worker.names
    spans_topic = f"otlp_spans-{uuid.uuid4().hex[:8]}"
    script = fam.AGENTS["stuck"]
    raw = fam.encoded_in_subprocess("openllmetry_langchain", ["stuck"])["stuck"]
    asyncio.run(produce(tansu, spans_topic, [(None, raw)]))
    native = rows(fam.native_events(script, origin="otel"), FleetConfig.from_document(CONFIG))
    keep = ("detector", "level", "count", "action", "warning_key", "tool_name")
    spans = SpansProcess(tansu, worker, spans_topic, tmp_path / "spans.log")
    try:
        events = [json.loads(o.value) for o in translate(Rec(spans_topic, 0, 0, None, raw), SpanSettings())]
        run = events[0]["run_id"]
        assert events[-1]["type"] == "run_end" and {e["run_id"] for e in events} == {run}

        def mine(recs) -> list[dict]:
            return [v for _, v in decode_verdicts(recs) if v["run_id"] == run]

        got = mine(collect(tansu, names.shadow, lambda recs: len(mine(recs)) >= len(native), timeout=90))
        assert [[v[k] for k in keep] for v in got] == [[r[k] for k in keep] for r in native]
        assert all(v["shadow"] is True and v["origin"] == "otel" for v in got)
    finally:
        assert spans.stop() == 0
