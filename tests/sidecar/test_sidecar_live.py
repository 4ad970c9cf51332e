"""The local decision service (``loopwarden sidecar`` processes) with a real worker on Tansu.

One worker with the shipped config (deploy/config/loopwarden.json5: warn at
10, block at 20) and two services on its topics: ``strict`` with the same
config (TCP and a Unix socket) and ``lax``, whose config has detection off,
so every verdict it answers comes from the worker. What is shown over HTTP:
a looping run warned at 10 and blocked at 20, audited by the worker as the
same decisions; the worker's warning and block (corrections) answered on the
run's next check; a run_start separating two prompts of one session;
results without call ids paired by tool and params (as published); the Unix
socket; and a service whose broker dies still deciding locally.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from loopwarden.devtools.broker import EmbeddedBroker
from loopwarden.sidecar.client import SidecarClient
from loopwarden.sidecar.process import SidecarProcess
from tests.support.live import REPO, Names, WorkerProcess, collect, ensure_topics_of, fleet_args

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = REPO / "deploy" / "config" / "loopwarden.json5"
AGREED = 'loopwarden_runner_decisions_total{agent="other",agreement="same"}'
# 21 identical calls, each with the same result: warned on the 11th (10 before it), blocked on the 21st
LOOP = ["allow"] * 10 + ["warn"] + ["allow"] * 9 + ["block"]


def sidecar_args(bootstrap: str, names: Names, config: Path) -> list[str]:
    return ["--config", str(config), *fleet_args(bootstrap, names)]


def until(predicate, timeout: float = 60.0, what: str = "") -> None:
    """A hang guard for what the worker or broker drives, not a latency check."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def stack(tansu, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sidecar-live")
    names = Names("sidecar")
    worker = WorkerProcess(tansu, names, tmp / "data", config=CONFIG, log_dir=tmp)
    worker.start()
    lax_config = tmp / "lax.json"
    lax_config.write_text(json.dumps({"tools": {"loopDetection": {"enabled": False}}}))
    sock = tmp / "lw.sock"
    strict = SidecarProcess([*sidecar_args(tansu, names, CONFIG), "--socket", str(sock)], log_path=tmp / "strict.log")
    lax = SidecarProcess(sidecar_args(tansu, names, lax_config), log_path=tmp / "lax.log")
    try:
        worker.wait_ready()
        strict.start()
        lax.start()
        for s in (strict, lax):
            with SidecarClient(s.url) as c:
                until(lambda c=c: c.health()["listening"], what="the service's verdict listener")
        yield {"worker": worker, "strict": strict, "lax": lax, "names": names, "tansu": tansu}
    finally:
        strict.stop()
        lax.stop()
        worker.stop()


def loop(client: SidecarClient, session: str, n: int = 21, ids: bool = True, agent: str = "dev") -> list[dict]:
    """``n`` identical calls of one session, each reported with the same result (no progress)."""
    answers = []
    for _ in range(n):
        a = client.check(agent, "exec", {"command": "npm test"}, session_id=session)
        answers.append(a)
        result = {"session_id": session, "tool_name": "exec", "params": {"command": "npm test"}}
        if ids:
            result["tool_call_id"] = a["tool_call_id"]
        if a["proceed"]:
            result["result"] = {"exit": 1, "stderr": "1 failing"}
        else:
            result["blocked"] = True
        assert client.result(agent, **result)["paired"] is True
    return answers


def test_a_looping_run_is_warned_at_10_and_blocked_at_20_and_audited(stack):
    worker = stack["worker"]
    before = worker.metrics().get(AGREED, 0.0)
    with SidecarClient(stack["strict"].url) as client:
        answers = loop(client, "loop-1")
        assert [a["action"] for a in answers] == LOOP
        warn, block = answers[10], answers[20]
        assert (warn["detector"], warn["count"], warn["source"]) == ("generic_repeat", 10, "local")
        assert (block["detector"], block["count"], block["proceed"]) == ("generic_repeat", 20, False)
        assert "exec" in block["message"] and "20" in block["message"]
        client.post("/v1/ack", {"agent_id": "dev", "session_id": "loop-1", "verdict_id": warn["verdict_id"]})
        client.post("/v1/run_end", {"agent_id": "dev", "session_id": "loop-1"})
    worker.wait_metric(AGREED, before + 21)  # the worker decided every call as the service did
    run_id = answers[0]["run_id"].encode()
    control = collect(stack["tansu"], stack["names"].control, idle=1.0, timeout=10.0)
    assert [r for r in control if r.key == run_id] == []  # nothing to correct


def test_the_workers_corrections_answer_the_runs_next_check(stack):
    """The lax service decides nothing; the worker's warning and block reach the run's next check."""
    with SidecarClient(stack["lax"].url) as client:
        before = client.get("/v1/stats")["client"]["corrections"]
        answers = loop(client, "lax-1", n=11)
        assert {a["action"] for a in answers} == {"allow"}
        until(lambda: client.get("/v1/stats")["client"]["corrections"] >= before + 1, what="the worker's warning")
        a = client.check("dev", "exec", {"command": "npm test"}, session_id="lax-1")
        assert (a["action"], a["source"], a["detector"], a["count"]) == ("warn", "worker_warning", "generic_repeat", 10)
        assert a["proceed"] and a["verdict_id"] and "exec" in a["message"]
        same = {"exit": 1, "stderr": "1 failing"}  # as loop() reports: no progress
        client.result("dev", session_id="lax-1", tool_call_id=a["tool_call_id"], result=same)
        loop(client, "lax-1", n=9)  # calls 13-21: the worker blocks the 21st
        until(lambda: client.get("/v1/stats")["client"]["corrections"] >= before + 2, what="the worker's block")
        b = client.check("dev", "exec", {"command": "npm test"}, session_id="lax-1")
        assert (b["action"], b["source"], b["detector"], b["count"]) == ("block", "pending_block", "generic_repeat", 20)
        assert not b["proceed"] and b["run_id"] == answers[0]["run_id"]


def test_run_start_separates_two_prompts_of_one_session(stack):
    worker = stack["worker"]
    before = worker.metrics().get(AGREED, 0.0)
    with SidecarClient(stack["strict"].url) as client:
        first = loop(client, "prompts-1", n=9)
        started = client.post("/v1/run_start", {"agent_id": "dev", "session_id": "prompts-1"})
        second = loop(client, "prompts-1", n=9)
        assert {a["action"] for a in first + second} == {"allow"}  # pooled, the 11th call would be warned
        assert started["ended"] == first[0]["run_id"] != started["run_id"] == second[0]["run_id"]
    worker.wait_metric(AGREED, before + 18)


def test_results_without_call_ids_pair_by_tool_and_params(stack):
    """A host without call ids (Gemini CLI): each result is published with its check's call id."""
    with SidecarClient(stack["strict"].url) as client:
        answers = loop(client, "noids-1", ids=False)
        assert [a["action"] for a in answers] == LOOP
    run_id = answers[0]["run_id"]

    def results(records):
        events = [json.loads(r.value) for r in records if r.key == run_id.encode()]
        return [e["tool_call_id"] for e in events if e["type"] == "tool_result"]

    records = collect(stack["tansu"], stack["names"].events, lambda r: len(results(r)) >= 21, idle=0.5)
    assert results(records) == [a["tool_call_id"] for a in answers]


def test_the_unix_socket_serves_the_same_contract(stack):
    worker = stack["worker"]
    before = worker.metrics().get(AGREED, 0.0)
    unix = stack["strict"].urls[1]
    assert unix.startswith("unix:") and oct(Path(unix[5:]).stat().st_mode & 0o777) == "0o600"
    with SidecarClient(unix) as client:
        answers = loop(client, "unix-1")
        assert [a["action"] for a in answers] == LOOP
        assert client.health()["broker"] == "connected"
    worker.wait_metric(AGREED, before + 21)


def test_a_service_whose_broker_dies_still_decides(tmp_path):
    names = Names("sidecardown")
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as broker:
        asyncio.run(ensure_topics_of(broker.bootstrap, names))
        service = SidecarProcess(
            [*sidecar_args(broker.bootstrap, names, CONFIG), "--socket", str(tmp_path / "s.sock")],
            log_path=tmp_path / "sidecar.log",
            env={"LOOPWARDEN_RUNNER_REQUEST_TIMEOUT_MS": "1500", "LOOPWARDEN_RUNNER_RECONNECT_BACKOFF_MAX": "0.5"},
        ).start()
        client = SidecarClient(service.url)
        try:
            until(lambda: client.health()["broker"] == "connected", what="the broker")
            assert [a["action"] for a in loop(client, "before-1", n=3)] == ["allow"] * 3
            broker.stop()
            answers = loop(client, "down-1")
            assert [a["action"] for a in answers] == LOOP  # decided here, the broker gone
            assert not any(a["failed_open"] for a in answers)
            until(lambda: client.health()["broker"] == "offline", what="the outage to be noticed")
            assert client.health()["buffered"] > 0  # kept for the broker's return
        finally:
            client.close()
            service.stop()


def test_the_workers_audit_restores_a_block_the_service_lost(stack, tmp_path):
    """F1 past the live share: a service whose tables hold 8 runs (4 of them live) loses a blocked run
    to a flood of 5 runs that each reach a warning. Its next identical call is decided on a fresh
    state (allowed), but the worker, which keeps the run's whole history, blocks it: the correction
    answers the run's next check, and the loop is blocked again."""
    names, tansu = stack["names"], stack["tansu"]
    small = SidecarProcess(
        [*sidecar_args(tansu, names, CONFIG), "--max-runs", "8", "--max-sessions", "8"],
        log_path=tmp_path / "small.log",
        env={"LOOPWARDEN_RUNNER_MAX_LOCAL_RUNS": "8"},
    ).start()
    try:
        with SidecarClient(small.url) as client:
            until(lambda: client.health()["listening"], what="the service's verdict listener")
            ids = {"session_id": "evicted-1", "run_id": "evicted-run-1"}
            call = ("dev", "exec", {"command": "npm test"})

            def step(a: dict, ids: dict) -> None:
                body = {**ids, "tool_name": "exec", "params": {"command": "npm test"}}
                body["tool_call_id"] = a["tool_call_id"]
                body |= {"result": {"exit": 1, "stderr": "1 failing"}} if a["proceed"] else {"blocked": True}
                client.result("dev", **body)

            answers = []
            for _ in range(21):
                answers.append(client.check(*call, **ids))
                step(answers[-1], ids)
            assert [a["action"] for a in answers] == LOOP
            for i in range(5):  # each reaches a warning (10 identical calls): live, past the live share of 4
                flood = {"session_id": f"flood-{i}", "run_id": f"flood-run-{i}"}
                warned = []
                for _ in range(11):
                    warned.append(client.check(*call, **flood))
                    step(warned[-1], flood)
                assert warned[-1]["action"] == "warn"
            stats = client.get("/v1/stats")["service"]
            assert stats["live_runs_evicted"] >= 1
            lost = client.check(*call, **ids)
            assert (lost["action"], lost["source"]) == ("allow", "local")  # the service's fresh state
            step(lost, ids)
            until(lambda: client.get("/v1/stats")["client"]["corrections"] >= 1, what="the worker's block")
            again = client.check(*call, **ids)
            assert (again["action"], again["source"], again["detector"]) == ("block", "pending_block", "generic_repeat")
            assert not again["proceed"] and again["run_id"] == "evicted-run-1"
    finally:
        small.stop()
