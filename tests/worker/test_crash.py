"""SIGKILL mid-stream: state comes back from the changelog, verdicts are those replay predicts.

Tansu reports wrong end offsets (streams/ARCHITECTURE.md, "Tansu"); without the correction in
streams/transport.py, recovery stops early and the verdicts after the
restart drift from replay. Delivery is at-least-once: a verdict may repeat
(same verdict_id), but none may be missing and no event may count twice.
"""

from __future__ import annotations

import json
import time

import pytest

from loopwarden.devtools.synthetic import fleet_events
from loopwarden.schemas.config import load_config
from tests.support.live import (
    ThrottledProducer,
    check_against_replay,
    collect,
    expected_verdicts,
    produce_events,
    wait_committed,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = {
    "tools": {
        "loopDetection": {
            "enabled": True,
            "warningThreshold": 6,
            "criticalThreshold": 12,
            "globalCircuitBreakerThreshold": 18,
        }
    }
}


def _events() -> list[dict]:
    # Long looping runs: verdicts late in a run depend on state built before the kill.
    return list(fleet_events(agents=12, runs_per_agent=3, run_length=45, loop_share=0.8, seed=23))


def _wait_until_all(tansu, names, expected):
    return collect(
        tansu,
        names.control,
        timeout=120,
        until=lambda records: set(expected) <= {json.loads(r.value).get("verdict_id") for r in records},
    )


def _changelog_not_fetched(worker, names) -> None:
    """The run table's changelog partitions are paused in the client, not only in Faust's bookkeeping:
    otherwise the worker's own state writes come back in a fetch nobody reads, and aiokafka holds
    back every fetch for 100 ms (streams/internals/faust_consumer.py)."""
    changelog = {f"{names.app_id}-runs-changelog/{p}" for p in range(4)}
    deadline = time.monotonic() + 5  # the pause reaches the client thread right after recovery
    while True:
        status, body = worker.get("/readyz")
        assert status == 200, body
        if changelog <= set(json.loads(body)["not_fetched"]) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert changelog <= set(json.loads(body)["not_fetched"]), body


def test_sigkill_wipe_restart_recovers_from_changelog(tansu, names, workers, tmp_path):
    config = tmp_path / "loop.json"
    config.write_text(json.dumps(CONFIG))
    worker = workers(names, "solo", config=config)
    worker.wait_ready()
    events = _events()
    split = len(events) // 3

    # 1. Kill when idle, all offsets committed: only the changelog holds the state. Tansu's
    #    wrong end offsets would drop the last changelog batch here (streams/ARCHITECTURE.md, "Tansu").
    positions = produce_events(tansu, names.events, events[:split])
    wait_committed(tansu, names.app_id, names.events, positions)
    _changelog_not_fetched(worker, names)  # paused since the first assignment (nothing to recover)
    worker.kill()
    worker.wipe()
    worker.start()
    worker.wait_ready()
    _changelog_not_fetched(worker, names)  # paused again once recovery has read them

    # 2. Kill mid-stream: replayed events must not count twice, their verdicts must not go missing.
    producer = ThrottledProducer(tansu, names.events, events[split:]).start()
    worker.wait_metric("loopwarden_events_total", (len(events) - split) // 3)
    assert producer.running, "the kill must land mid-stream"
    worker.kill()
    worker.wipe()
    positions += producer.join()
    worker.start()
    worker.wait_ready()

    expected = expected_verdicts(events, positions, names.events, load_config(config))
    stats = check_against_replay(_wait_until_all(tansu, names, expected), expected)
    assert stats["verdicts"] == len(expected)


def test_sigkill_one_of_two_workers_survivor_takes_over(tansu, names, workers, tmp_path):
    config = tmp_path / "loop.json"
    config.write_text(json.dumps(CONFIG))
    first = workers(names, "one", config=config)
    second = workers(names, "two", config=config)
    for w in (first, second):
        w.wait_ready()
    events = _events()
    producer = ThrottledProducer(tansu, names.events, events).start()

    # Kill a worker that owns partitions once the stream is well under way.
    first.wait_metric("loopwarden_events_total", 200)
    second.wait_metric("loopwarden_events_total", 200)
    victim, survivor = (first, second)
    victim.kill()
    positions = producer.join()

    expected = expected_verdicts(events, positions, names.events, load_config(config))
    stats = check_against_replay(_wait_until_all(tansu, names, expected), expected)
    assert stats["verdicts"] == len(expected)
    survivor.wait_metric("loopwarden_assigned_partitions", 4)
