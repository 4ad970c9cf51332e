"""The openclaw-latest profile switched on live through the config topic: the worker's verdicts are
replay's under the same config, liveness signal included."""

from __future__ import annotations

import asyncio
import json

import pytest

from loopwarden.schemas.config import FleetConfig
from tests.support.live import assert_matches, collect, decode_verdicts, expected_verdicts, produce, produce_events

pytestmark = pytest.mark.integration

VETO = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}
# writeChurn: upstream's write-mutation churn (not in the release) opted in, live like the profile
DOC = {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"profile": "openclaw-latest", "writeChurn": True}}


def _trace() -> list[dict]:
    """Write churn (no repeated signature), error churn, and a loop that escalates past 20 (vetoes)."""
    events: list[dict] = []

    def pair(run: str, i: int, tool: str, params: dict, outcome: dict) -> None:
        base = {"agent_id": "a1", "run_id": run, "tool_name": tool, "tool_call_id": f"{run}-{i}", "params": params}
        events.append({"type": "tool_call", **base})
        events.append({"type": "tool_result", **base, **outcome})

    for i in range(12):
        pair("w", i, "write", {"path": "f.txt", "content": i}, {"result": {"details": {"changed": True}}})
    for i in range(12):
        pair("c", i, "search", {"q": "ab"[i % 4 // 2]}, {"error": "no index"})
    for i in range(25):  # an obedient runner: from the 21st call on, each result is the veto
        pair("g", i, "read", {"p": 1}, {"result": VETO if i >= 20 else "same"})
    return events


def test_profile_switched_on_live_equals_replay(tansu, names, workers):
    worker = workers(names)  # no file: defaults, rolling detectors off
    worker.wait_ready()
    asyncio.run(produce(tansu, names.config, [(b"*", json.dumps(DOC).encode())]))
    worker.wait_metric("loopwarden_config_updates_total", 1)

    events = _trace()
    positions = produce_events(tansu, names.events, events)
    fleet = FleetConfig.from_document(DOC)
    expected = expected_verdicts(events, positions, names.events, fleet)
    got = decode_verdicts(collect(tansu, names.control, until=lambda rs: len(rs) >= len(expected), timeout=60))
    by_id = {v["verdict_id"]: v for _k, v in got}
    assert set(by_id) == set(expected)
    for vid, row in expected.items():
        assert_matches(by_id[vid], row)
        assert by_id[vid].get("liveness_signal") == row.get("liveness_signal")
    detectors = [(v["run_id"], v["detector"], v["count"]) for v in by_id.values()]
    assert ("w", "argument_churn", 10) in detectors
    assert ("g", "generic_repeat", 21) in detectors  # blocked retries climb (OpenClaw's docs revision: 20)
    assert all(v["liveness_signal"] == "argument_churn" for v in by_id.values() if v["detector"] == "argument_churn")
