"""State follows active runs: run_end drops state, idle runs expire, repeated event_ids are dropped."""

from __future__ import annotations

import time

import pytest

from tests.support.live import produce_events

pytestmark = pytest.mark.integration


def _calls(run: str, n: int, **extra) -> list[dict]:
    return [
        {
            "type": "tool_call",
            "agent_id": "a1",
            "run_id": run,
            "tool_name": "read",
            "params": {"path": f"/{run}"},
            **extra,
        }
        for _ in range(n)
    ]


def test_run_end_ttl_expiry_and_duplicates(tansu, names, workers):
    worker = workers(names, extra=["--run-ttl", "2", "--ended-ttl", "2", "--expire-interval", "1"])
    worker.wait_ready()

    events = (
        _calls("run-a", 3)
        + _calls("run-b", 3)
        + _calls("run-c", 2)
        + [{"type": "run_end", "agent_id": "a1", "run_id": "run-c"}]
    )
    events += _calls("run-d", 1, event_id="e-1") + _calls("run-d", 1, event_id="e-1")  # a redelivery
    produce_events(tansu, names.events, events)
    worker.wait_metric("loopwarden_events_total", len(events))
    assert worker.metrics()["loopwarden_duplicate_events_total"] == 1

    # All four runs go idle: their state (and run-c's end marker) is expired; nothing stays active.
    worker.wait_metric("loopwarden_expired_runs_total", 4)
    deadline = time.monotonic() + 30
    while worker.metrics()["loopwarden_active_runs"] != 0:
        assert time.monotonic() < deadline, "active runs never dropped to 0"
        time.sleep(0.2)
