"""Failover and restarts as an operator sees them: a log without false alarms, real stalls still
reported, no traceback at a clean stop, ``loopwarden_active_runs`` right on every worker.

Faust's stall check runs every 2.5 commit intervals and reports a partition after
``--partition-stall-timeout``; both are short here so a check that would fire after five minutes
in production fires within seconds.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.support.live import ensure_topics_of, produce_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUICK_CHECK = ["--partition-stall-timeout", "2", "--commit-interval", "0.4"]  # checked every second
FALSE_ALARMS = ("has not started processing", "has not sent fetch request")
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|Crashed reason|AttributeError")


def _runs(prefix: str, runs: int, calls: int = 2) -> list[dict]:
    events = []
    for r in range(runs):
        for i in range(calls):
            call = {
                "type": "tool_call",
                "agent_id": f"agent-{r % 20}",
                "run_id": f"{prefix}-{r}",
                "tool_name": "read",
                "tool_call_id": f"{prefix}-{r}-{i}",
                "params": {"path": f"/{prefix}/{r}/{i}"},
            }
            events += [call, {**call, "type": "tool_result", "result": {"content": [{"type": "text", "text": "ok"}]}}]
    return events


def test_a_healthy_worker_logs_no_stall_errors(tansu, names, workers):
    """The batch route bypasses Faust's stream and the run table's changelogs are paused on purpose:
    neither may be reported as stalled while the worker processes normally (a backlog and idle)."""
    worker = workers(names, extra=QUICK_CHECK)
    worker.wait_ready()
    time.sleep(3)  # past the stall timeout since start, idle: the paused changelogs were reported here
    events = _runs("busy", 5000)
    produce_events(tansu, names.events, events)
    worker.wait_metric("loopwarden_events_total", len(events), timeout=120)
    time.sleep(3)
    log = worker.log_path.read_text()
    assert not [line for line in log.splitlines() if any(text in line for text in FALSE_ALARMS)], log[-3000:]


def test_a_real_stall_is_still_reported(tansu, names, tmp_path, caplog):
    """Faust's own check on real aiokafka state, at a moment past the timeout: records waiting on a
    partition the fetch loop has not taken for that long are reported; a changelog paused on purpose
    is not. (A broker that stops answering is not seen by Faust's check: it compares aiokafka's
    wall-clock fetch time with a monotonic one; /healthz and the lag gauge are the signals there.)"""
    import asyncio

    import aiokafka
    from faust.types import TP

    from loopwarden.worker.app import create_app
    from loopwarden.worker.settings import from_sources

    settings = from_sources(
        {"broker": f"kafka://{tansu}", "data_dir": str(tmp_path / "data"), "partition_stall_timeout": 2},
        environ={},
    )
    settings.events_topic = names.events
    app, _ = create_app(settings)
    asyncio.run(ensure_topics_of(tansu, names))
    produce_events(tansu, names.events, _runs("waiting", 40))
    events = TP(names.events, 0)
    changelog = TP(f"{names.app_id}-runs-changelog", 0)

    async def check() -> list[str]:
        thread = app.consumer._thread
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=tansu, enable_auto_commit=False)
        await consumer.start()
        try:
            thread._consumer = consumer
            thread.time_started = time.monotonic() - 100
            tps = [aiokafka.TopicPartition(*events), aiokafka.TopicPartition(names.events, 1)]
            consumer.assign([*tps, aiokafka.TopicPartition(*changelog)])
            consumer.pause(aiokafka.TopicPartition(*changelog))  # as the worker pauses its table's changelog
            for tp in tps:
                consumer.seek(tp, 0)
            deadline = time.monotonic() + 20
            while not all((consumer.highwater(tp) or 0) > 1 for tp in tps) and time.monotonic() < deadline:
                await consumer.getmany(*tps, timeout_ms=200, max_records=1)  # one record taken, the rest wait
            app.topics._acking_topics.add(names.events)  # as the agent's subscription records it
            inbound = app.monitor.stream_inbound_time
            now = time.monotonic()
            inbound[events] = now - 10  # the fetch loop last took partition 0 ten seconds ago
            inbound[TP(names.events, 1)] = now  # and partition 1 just now
            caplog.clear()
            for tp in (events, TP(names.events, 1), changelog):
                thread.verify_event_path(now, tp)
            return [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        finally:
            thread._consumer = None
            await consumer.stop()

    errors = asyncio.run(check())
    assert any("Stream stopped processing" in e and "partition=0" in e for e in errors), errors
    assert not any("partition=1" in e for e in errors), errors
    assert not any("changelog" in e for e in errors), errors


def _wait_for(predicate, timeout: float, what) -> None:
    """Poll ``predicate``; on timeout fail with ``what`` (a callable is read then, so it shows the end state)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what() if callable(what) else what
        time.sleep(0.05)


def _checks(worker) -> dict:
    try:
        return json.loads(worker.get("/readyz")[1])["checks"]
    except OSError:
        return {}


def test_sigterm_during_a_rebalance_stops_without_a_traceback(tansu, names, workers):
    """Stopping the second worker right after the first left (its group rebalancing) is a clean stop:
    Faust's fetcher took the cancellation for a crash and logged two tracebacks."""
    a, b = workers(names, "a"), workers(names, "b")
    _wait_for(lambda: _checks(a).get("partitions_assigned") and _checks(b).get("partitions_assigned"), 120, "no split")
    _wait_for(lambda: all(_checks(a).values()) and all(_checks(b).values()), 60, "the group did not settle")
    assert a.stop() == 0  # leaves the group: b rebalances
    _wait_for(lambda: _checks(b).get("not_rebalancing") is False, 30, "b never saw the rebalance")
    assert b.stop() == 0
    for worker in (a, b):
        log = worker.log_path.read_text()
        assert not TRACEBACK.search(log), log[-4000:]


def test_active_runs_are_right_on_every_worker_after_a_fill_and_a_failover(tansu, names, workers):
    """Each worker counts the runs of its own partitions right after a fill (the gauge was the last
    expiry sweep's count: 0 until a sweep came), and a survivor counts the partitions it took over."""
    sweeps_never = ["--expire-interval", "3600"]
    a, b = workers(names, "a", extra=sweeps_never), workers(names, "b", extra=sweeps_never)
    _wait_for(lambda: all(_checks(a).values()) and all(_checks(b).values()), 120, "the group did not settle")
    _wait_for(lambda: _checks(a).get("partitions_assigned") and _checks(b).get("partitions_assigned"), 60, "no split")
    runs = 3000
    events = _runs("fill", runs, calls=1)
    produce_events(tansu, names.events, events)

    def gauges() -> list[float]:
        return [w.metrics().get("loopwarden_active_runs", 0.0) for w in (a, b)]

    _wait_for(lambda: sum(gauges()) == runs, 30, lambda: f"active runs {gauges()} != {runs}")
    assert all(g > 0 for g in gauges()), gauges()
    b.stop()
    _wait_for(lambda: a.metrics().get("loopwarden_active_runs") == runs, 90, lambda: f"survivor counts {gauges()[0]}")
    # B back, runs started on its partitions, B gone again: A must not keep its count of those
    # partitions from before they left (the runs B started there were never A's batches).
    b.start()
    _wait_for(lambda: _checks(b).get("partitions_assigned") and all(_checks(a).values()), 90, "b did not rejoin")
    _wait_for(lambda: all(_checks(b).values()), 60, "b not ready")
    more = _runs("more", 1000, calls=1)
    produce_events(tansu, names.events, more)
    _wait_for(lambda: sum(gauges()) == runs + 1000, 30, lambda: f"active runs {gauges()} != {runs + 1000}")
    b.stop()
    _wait_for(lambda: a.metrics().get("loopwarden_active_runs") == runs + 1000, 90, lambda: f"survivor: {gauges()[0]}")
