"""Hostile input and hostile neighbours on live workers (issue 23): no single record stops a worker.

- 20,000 per-agent config records on the config topic: a fresh worker loads them and gets ready
  (each record used to rebuild the whole per-agent map: every worker exited 70 at start, for good);
  a ``*`` tombstone gives the config file's global block back (it used to leave detection off).
- A run whose state outgrows what the changelog accepts: that run's state is reset and counted,
  the worker goes on (the changelog send used to raise and the worker exited, on every replay too).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.support.live import collect, decode_verdicts, produce, produce_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FILE = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}


def _calls(run: str, agent: str, n: int) -> list[dict]:
    """``n`` identical calls with identical results; the last call awaits a decision (a marker)."""
    events = []
    for i in range(n):
        base = {"agent_id": agent, "run_id": run, "tool_name": "read", "tool_call_id": f"{run}-{i}"}
        events.append({"type": "tool_call", **base, "params": {"path": "/same"}, "await_decision": i == n - 1})
        if i < n - 1:
            events.append({"type": "tool_result", **base, "params": {"path": "/same"}, "result": "same"})
    return events


def test_twenty_thousand_agent_overrides_load_and_a_star_tombstone_restores_the_file(tansu, names, workers, tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps(FILE))
    records: list[tuple[bytes | None, bytes | None]] = [
        (f"agent-{i}".encode(), json.dumps({"enabled": False}).encode()) for i in range(20_000)
    ]
    records += [(b"*", json.dumps({"enabled": False}).encode()), (b"*", None)]
    asyncio.run(produce(tansu, names.config, records))

    worker = workers(names, config=config)
    worker.wait_ready(timeout=180)
    assert worker.metrics()["loopwarden_config_updates_total"] == len(records)
    produce_events(tansu, names.events, _calls("run-off", "agent-7", 6))  # its override: detection off
    produce_events(tansu, names.events, _calls("run-on", "agent-free", 6))  # the file's global block again
    verdicts = decode_verdicts(collect(tansu, names.control, until=lambda rs: len(rs) >= 2))
    by_run = {v["run_id"]: (v["action"], v.get("detector"), v.get("count")) for _key, v in verdicts}
    assert by_run == {"run-off": ("allow", None, None), "run-on": ("block", "generic_repeat", 5)}
    assert worker.alive()


def test_a_run_state_larger_than_the_changelog_accepts_is_reset_and_the_worker_goes_on(tansu, names, workers, tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"tools": {"loopDetection": {"enabled": True, "historySize": 1000}}}))
    # Records up to 100 KB: the changelog takes a run value of at most about that much.
    worker = workers(names, config=config, extra=["--max-message-bytes", "100000"])
    worker.wait_ready()
    # 300 distinct calls with ids at their caps: about 250 KB of state in one run.
    big = [
        {
            "type": "tool_call",
            "agent_id": "a",
            "run_id": "big",
            "tool_name": f"{i:03d}" + "t" * 253,
            "tool_call_id": f"{i:03d}" + "c" * 509,
            "event_id": f"{i:03d}" + "e" * 509,
            "params": {"i": i},
        }
        for i in range(300)
    ]
    produce_events(tansu, names.events, big)
    worker.wait_metric("loopwarden_oversized_runs_total", 1)
    produce_events(tansu, names.events, _calls("after", "b", 6))  # the stream goes on

    def answered(rs: list) -> bool:
        return any(json.loads(r.value).get("run_id") == "after" for r in rs)

    verdicts = decode_verdicts(collect(tansu, names.control, until=answered))
    assert ("after", "allow") in {(v["run_id"], v["action"]) for _key, v in verdicts}
    assert worker.alive()


def test_the_stall_exit_is_rearmed_by_the_heartbeat(tansu, names, workers, tmp_path):
    """A worker whose stall exit is 5 s stays up for longer than that while its loop runs (the heartbeat
    re-arms the C-level timer; armed once, it exits 5 s later); the exit itself is tested on a stall inside
    C code in tests/worker/test_health.py."""
    config = tmp_path / "c.json"
    config.write_text(json.dumps(FILE))
    worker = workers(names, config=config, extra=["--stall-exit-after", "5"])
    worker.wait_ready()
    produce_events(tansu, names.events, _calls("run-a", "a", 6))
    verdicts = decode_verdicts(collect(tansu, names.control, until=lambda rs: len(rs) >= 1, idle=10.0))
    assert [v["action"] for _key, v in verdicts] == ["block"]
    assert worker.alive()
