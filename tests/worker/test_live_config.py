"""Overrides on the compacted config topic change thresholds without a restart."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.support.live import collect, decode_verdicts, produce, produce_events

pytestmark = pytest.mark.integration


def _calls(run: str, agent: str, n: int) -> list[dict]:
    """``n`` identical calls with identical results; the last call awaits a decision (a marker)."""
    events = []
    for i in range(n):
        base = {
            "agent_id": agent,
            "run_id": run,
            "tool_name": "read",
            "tool_call_id": f"{run}-{i}",
            "params": {"path": "/same"},
        }
        events.append({"type": "tool_call", **base, "await_decision": i == n - 1})
        if i < n - 1:
            events.append({"type": "tool_result", **base, "result": "same"})
    return events


def test_config_topic_overrides_apply_live(tansu, names, workers):
    worker = workers(names)  # no file: defaults, rolling detectors off
    worker.wait_ready()

    def configure(key: bytes, block: dict | None, updates: int) -> None:
        value = None if block is None else json.dumps(block).encode()
        asyncio.run(produce(tansu, names.config, [(key, value)]))
        worker.wait_metric("loopwarden_config_updates_total", updates)

    configure(b"*", {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}, 1)
    produce_events(tansu, names.events, _calls("run-a", "a1", 6))
    configure(b"a2", {"enabled": False}, 2)
    produce_events(tansu, names.events, _calls("run-b", "a2", 6))
    configure(b"*", None, 3)
    produce_events(tansu, names.events, _calls("run-c", "a1", 6))

    verdicts = decode_verdicts(collect(tansu, names.control, until=lambda rs: len(rs) >= 3))
    by_run: dict[str, list] = {}
    for _key, v in verdicts:
        by_run.setdefault(v["run_id"], []).append((v["action"], v.get("detector"), v.get("count")))
    assert by_run == {
        "run-a": [("block", "generic_repeat", 5)],  # critical at 5 instead of 20
        "run-b": [("allow", None, None)],
        "run-c": [("allow", None, None)],
    }
