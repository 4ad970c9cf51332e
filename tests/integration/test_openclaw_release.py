"""The openclaw-latest profile against the OpenClaw release users run (openclaw@2026.9.6, Node 24).

- Detector: seeded traces go through the release's compiled detector, called
  as its runner calls it (tests/hosts/openclaw_detector.mjs), and through
  ``loopwarden replay`` with the profile: the same warnings and blocks at the
  same calls, with the same detector, count, warning key and message.
- Live turn: see test_openclaw_release_live.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hosts.openclaw_traces import batches, generate, release_rows, replay_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SEEDS = range(16)
PROFILE_CONFIG = {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"profile": "openclaw-latest"}}


def _steps(seeds, max_batch: int = 1) -> list[dict]:
    steps = []
    for seed in seeds:
        session, run = f"s{seed}", f"r{seed}"
        calls = [dict(c, id=f"{run}-{i}") for i, c in enumerate(generate(seed))]
        steps.extend({"session": session, "run": run, "calls": b} for b in batches(calls, seed, max_batch))
    return steps


def _replay(events: list[dict], tmp: Path, config_doc: dict = PROFILE_CONFIG) -> list[dict]:
    trace, config = tmp / "trace.jsonl", tmp / "config.json"
    trace.write_text("".join(json.dumps(e) + "\n" for e in events))
    config.write_text(json.dumps(config_doc))
    loopwarden = Path(sys.executable).with_name("loopwarden")
    proc = subprocess.run(
        [str(loopwarden), "replay", "--config", str(config), str(trace)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.strip() == ""  # no bad line
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    by_index = {i: e for i, e in enumerate(events)}
    out = []
    for r in rows:
        if not r["emitted"]:
            continue
        event = by_index[r["event_index"]]
        assert event["type"] == "tool_call"
        out.append((event["tool_call_id"], r["action"], r["detector"], r["count"], r["warning_key"], r["message"]))
    return out


def test_release_detector_and_replay_agree_verdict_for_verdict(tmp_path):
    steps = _steps(SEEDS)
    rows = release_rows(steps, tmp_path)
    release = [
        (r["id"], r["action"], r["detector"], r["count"], r["warningKey"], r["message"])
        for r in rows
        if r["action"] in ("warn", "block")
    ]
    ours = _replay(replay_events(steps, rows), tmp_path)
    kinds = {(a, d) for _, a, d, *_ in release}
    # the traces reach every detector of the release, warned and blocked
    for needed in (
        ("warn", "generic_repeat"),
        ("block", "generic_repeat"),
        ("block", "global_circuit_breaker"),
        ("warn", "known_poll_no_progress"),
        ("block", "known_poll_no_progress"),
        ("warn", "ping_pong"),
        ("block", "ping_pong"),
        ("block", "unknown_tool_repeat"),
        ("warn", "argument_churn"),
    ):
        assert needed in kinds, needed
    assert len(release) > 100
    assert ours == release


def test_upstream_write_churn_is_what_the_release_lacks(tmp_path):
    """With ``writeChurn`` opted in, replay adds write-mutation churn warnings and nothing else changes
    where they do not fire: the one upstream rule the release does not have."""
    steps = _steps(SEEDS)
    rows = release_rows(steps, tmp_path)
    events = replay_events(steps, rows)
    release = _replay(events, tmp_path)
    opted = _replay(
        events, tmp_path, {**PROFILE_CONFIG, "loopwarden": {"profile": "openclaw-latest", "writeChurn": True}}
    )
    extra = [v for v in opted if v not in release]
    assert extra and all(v[2] == "argument_churn" and ":write-mutation:" in v[4] for v in extra)
    assert [v for v in opted if v not in extra] == [v for v in release if v[0] not in {e[0] for e in extra}]
