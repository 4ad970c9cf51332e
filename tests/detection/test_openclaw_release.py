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

from tests.hosts.openclaw_traces import batches, generate, release_rows, replay_events, text

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
    calls = {c["id"]: c for step in steps for c in step["calls"]}
    across = [v for v in release if calls[v[0]]["params"].get("command", "").startswith("curl ")]
    assert across  # different commands failing alike count together (RULES.md L14), in the release too
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


async def _runner_rows(steps: list[dict]) -> list[dict]:
    """The same batches through a LoopClient deciding locally under the profile (no broker: nothing is sent)."""
    from loopwarden.runner import LoopClient

    client = LoopClient(config=PROFILE_CONFIG, decisions="local")
    runs: dict[str, object] = {}
    rows = []
    for step in steps:
        run = runs.get(step["run"])
        if run is None:
            run = runs[step["run"]] = client.run("main", session_id=step["session"], run_id=step["run"])
        decisions = await client.check_batch([run.call(c["tool"], c["params"], c["id"]) for c in step["calls"]])
        for call, d in zip(step["calls"], decisions, strict=True):
            v = d.verdict
            if d.recovery == "sibling" or d.source == "aborted":
                rows.append({"id": call["id"], "action": "skipped"})
                continue
            rows.append(
                {
                    "id": call["id"],
                    "action": "block" if d.action in ("block", "abort") else d.action,
                    "detector": v.detector if v else None,
                    "count": v.count if v else None,
                    "warning_key": v.warning_key if v else None,
                    "note": d.note,
                    "terminal": d.terminal,
                }
            )
            if d.proceed:
                await client.tool_result(
                    d, **({"error": call["error"]} if "error" in call else {"result": call["result"]})
                )
            else:
                await client.tool_result(d, result=d.blocked_result())
    return rows


def test_runner_batch_admission_matches_the_release(tmp_path):
    """Assistant batches of 1-4 calls: the runner admits, warns, refuses with the batch and stops the run
    exactly where the release's batch admission does (the release keeps judging after its run would have
    stopped; the runner answers ``abort`` from then on, so rows are compared up to each run's stop)."""
    import asyncio

    steps = _steps(SEEDS, max_batch=4)
    assert any(len(s["calls"]) > 1 for s in steps)
    release = release_rows(steps, tmp_path)
    ours = asyncio.run(_runner_rows(steps))
    assert [r["id"] for r in ours] == [r["id"] for r in release]
    stopped: set[str] = set()
    blocks_per_run: dict[str, int] = {}
    compared = 0
    for mine, theirs in zip(ours, release, strict=True):
        run = theirs["run"]
        if run in stopped:
            assert mine["action"] == "skipped"  # the run was aborted: every later call is refused
            continue
        assert mine["action"] == theirs["action"], (mine, theirs)
        if theirs["action"] in ("warn", "block"):
            assert (mine["detector"], mine["count"], mine["warning_key"]) == (
                theirs["detector"], theirs["count"], theirs["warningKey"],
            ), (mine, theirs)  # fmt: skip
            compared += 1
        if theirs["action"] == "warn":
            assert mine["note"] == (
                f"[System note: Tool-loop warning after {theirs['count']} repeated calls. "
                "Change your approach or stop if you are not making progress.]"
            )
        if theirs["action"] == "block":
            blocks_per_run[run] = blocks_per_run.get(run, 0) + 1
            assert mine["terminal"] == (blocks_per_run[run] == 2)
            if blocks_per_run[run] == 2:
                stopped.add(run)
    assert compared > 50 and stopped


def test_config_check_names_what_the_release_config_validate_rejects(tmp_path):
    """``openclaw config validate`` (the release) and ``loopwarden config check`` (the profile) on one block:
    each key the release rejects is named by config check."""
    import re

    from loopwarden.schemas.config_check import check_document
    from tests.hosts.openclaw_host import openclaw, write_config

    block = {
        "enabled": True,
        "historySize": 40,
        "warningThreshold": 5,
        "criticalThreshold": 9,
        "unknownToolThreshold": 3,
        "globalCircuitBreakerThreshold": 12,
        "detectors": {"pingPong": False},
        "postCompactionGuard": {"windowSize": 5},
    }
    home = tmp_path / "home"
    home.mkdir()
    config = write_config(tmp_path / "openclaw.json", "http://127.0.0.1:9/v1", loop_detection=block)
    proc = openclaw(["config", "validate", "--json"], home, config, timeout=180)
    assert proc.returncode != 0
    issues = json.loads(proc.stdout[proc.stdout.index("{") :])["issues"]
    (issue,) = [i for i in issues if i["path"] == "tools.loopDetection"]
    rejected = set(re.findall(r'"([A-Za-z]+)"', issue["message"]))
    assert rejected == set(block) - {"enabled"}
    report = check_document({"tools": {"loopDetection": block}, "loopwarden": {"profile": "openclaw-latest"}})
    named = {n.key for n in report.blocks[0].notes if "is rejected by openclaw@2026.9.6" in n.text}
    assert named == rejected
    write_config(config, "http://127.0.0.1:9/v1", loop_detection={"enabled": True})
    assert openclaw(["config", "validate", "--json"], home, config, timeout=180).returncode == 0


def _blank_steps() -> list[dict]:
    """Ping-pong with a whitespace-only tool name on one side (normalised to ``""``), in three runs: pending calls,
    stable outcomes on both sides (evidence, so a block), and the blank side first."""

    def side(i: int, blank_first: bool, outcome: bool) -> dict:
        blank = (i % 2 == 0) == blank_first
        call = {"tool": " " if blank else "read", "params": {} if blank else {"path": "a.md"}}
        return {**call, "result": text("B" if blank else "A")} if outcome else call

    runs = {"pending": (False, False), "stable": (False, True), "blank-first": (True, True)}
    steps = [
        {"session": f"s-{name}", "run": name, "calls": [dict(side(i, first, outcome), id=f"{name}-{i}")]}
        for name, (first, outcome) in runs.items()
        for i in range(30)
    ]
    # a blank name is judged as "tool" (recorded as ""): after 20 calls of a tool named "tool", it is blocked
    named = [{"tool": "tool" if i < 20 else " ", "params": {}, "result": text("same")} for i in range(23)]
    return steps + [
        {"session": "s-named", "run": "named", "calls": [dict(c, id=f"named-{i}")]} for i, c in enumerate(named)
    ]


def test_ping_pong_with_a_blank_tool_name_on_the_other_side(tmp_path):
    """RULES.md §7.4 step 2 and L1.4: the release's ping-pong streak is 0 when the other side's tool name is blank,
    so only the named side's calls count (its warning lands on the 11th call, not the 10th; its block on the
    21st); a blank-named call is judged as ``tool`` and recorded as ``""``, and its block records no veto."""
    steps = _blank_steps()
    rows = release_rows(steps, tmp_path)
    release = [
        (r["id"], r["action"], r["detector"], r["count"], r["warningKey"], r["message"])
        for r in rows
        if r["action"] in ("warn", "block")
    ]
    assert ("pending-10", "warn") in {v[:2] for v in release}  # the named side, count 11
    assert ("stable-20", "block") in {v[:2] for v in release}  # count 21, the first block
    assert ("named-20", "block") in {v[:2] for v in release} and ("named-22", "block") in {v[:2] for v in release}
    assert _replay(replay_events(steps, rows), tmp_path) == release
