"""Seeded tool-call traces that reach every detector of the OpenClaw release, and the release's verdicts on them.

:func:`generate` builds one run's calls from random segments (a call
repeated with one outcome, two calls alternating, a few argument variants
failing alike, an ``exec`` failing with drifting timestamps or across
commands, an unknown tool, known polls, unchanged and changed writes,
noise). :func:`release_rows` feeds assistant batches of such calls through
the release's own batch admission and outcome recording
(``openclaw_detector.mjs`` under Node 24) and returns one row per call.
:func:`replay_events` turns the same calls into a loopwarden trace, the
blocked calls answered with the veto as an obedient runner would.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

from tests.hosts.install import node24
from tests.hosts.openclaw_host import env_for_node, release_dist

SCRIPT = Path(__file__).with_name("openclaw_detector.mjs")


def text(t: str, **details: Any) -> dict:
    out: dict[str, Any] = {"content": [{"type": "text", "text": t}]}
    if details:
        out["details"] = details
    return out


def _segment(rng: random.Random, n: int) -> list[dict]:
    kind = rng.choice(
        ["repeat", "repeat", "pingpong", "churn", "exec_drift", "exec_across", "unknown", "poll", "write", "noise"]
    )
    k = rng.randint(3, 34)
    path = rng.choice(["a.md", "b.md", "c.md"])
    if kind == "repeat":
        tool = rng.choice(["read", "search", "web_fetch"])
        params = {"path": path} if tool == "read" else {"q": path}
        outcome = rng.choice([{"error": "File not found"}, {"result": text("same page")}, {"result": text(f"v{n}")}])
        return [{"tool": tool, "params": params, **outcome} for _ in range(k)]
    if kind == "pingpong":
        a, b = {"path": path}, {"path": path + ".bak"}
        changing = rng.random() < 0.3
        return [
            {
                "tool": "read",
                "params": a if i % 2 == 0 else b,
                "result": text(f"r{i}" if changing else ("A" if i % 2 == 0 else "B")),
            }
            for i in range(k + 10)
        ]
    if kind == "churn":
        variants = [{"q": f"term{j}"} for j in range(rng.randint(2, 3))]
        return [
            {"tool": "search", "params": variants[i % len(variants)], "error": "rate limited"} for i in range(k + 6)
        ]
    if kind == "exec_drift":
        cmd = {"command": rng.choice(["make test", "npm ci"])}
        return [
            {
                "tool": "exec",
                "params": cmd,
                "result": text(
                    "", status="failed", exitCode=2, aggregated=f"boom at 10:00:{i % 60:02d} pid {1000 + i} took {i}ms"
                ),
            }
            for i in range(k)
        ]
    if kind == "exec_across":
        return [
            {
                "tool": "exec",
                "params": {"command": f"curl host{i}"},  # a new command each time
                "result": text("", status="failed", exitCode=7, aggregated=f"connect failed attempt {i} (errno 111)"),
            }
            for i in range(k + 16)  # long enough for a failure streak across commands to block
        ]
    if kind == "unknown":
        return [{"tool": "frobnicate", "params": {"x": 1}, "error": "Unknown tool: frobnicate"} for _ in range(k)]
    if kind == "poll":
        if rng.random() < 0.5:
            return [
                {
                    "tool": "process",
                    "params": {"action": "poll", "sessionId": "p1"},
                    "result": text("running", status="running"),
                }
                for _ in range(k)
            ]
        return [{"tool": "command_status", "params": {"id": "c1"}, "result": text("pending")} for _ in range(k)]
    if kind == "write":
        changed = rng.random() < 0.5
        return [
            {
                "tool": "write",
                "params": {"path": path, "content": f"x{i if changed else i % 3}"},
                "result": text("ok", changed=changed),
            }
            for i in range(k)
        ]
    return [
        {"tool": "read", "params": {"path": f"n{n}-{i}"}, "result": text(f"n{i}")} for i in range(rng.randint(1, 4))
    ]


def generate(seed: int, calls: int = 120) -> list[dict]:
    """One run's calls (tool, params, and the outcome the tool would give when it runs)."""
    rng = random.Random(seed)
    out: list[dict] = []
    while len(out) < calls:
        out.extend(_segment(rng, len(out)))
    return out[:calls]


def batches(calls: list[dict], seed: int, max_batch: int = 1) -> list[list[dict]]:
    """``calls`` split into assistant batches of 1..``max_batch`` calls."""
    rng = random.Random(seed ^ 0x5EED)
    out, i = [], 0
    while i < len(calls):
        n = rng.randint(1, max_batch)
        out.append(calls[i : i + n])
        i += n
    return out


def release_rows(steps: list[dict], tmp: Path) -> list[dict]:
    """The release's row per call: ``steps`` = [{session, run, calls: [{id, tool, params, result|error}]}]."""
    src, out = tmp / "release-steps.json", tmp / "release-rows.jsonl"
    src.write_text(json.dumps(steps))
    proc = subprocess.run(
        [str(node24()), str(SCRIPT), str(release_dist()), str(src), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env_for_node(),
        cwd=str(tmp),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def replay_events(steps: list[dict], rows: list[dict], agent: str = "main") -> list[dict]:
    """The calls as loopwarden events: each call, then its outcome (the veto where the release blocked it)."""
    action = {r["id"]: r["action"] for r in rows}
    events = []
    for step in steps:
        for call in step["calls"]:
            if action[call["id"]] == "skipped":
                continue
            base = {
                "agent_id": agent,
                "session_id": step["session"],
                "run_id": step["run"],
                "tool_name": call["tool"],
                "tool_call_id": call["id"],
                "params": call["params"],
            }
            events.append({"type": "tool_call", **base})
            if action[call["id"]] == "block":
                veto = {"status": "blocked", "deniedReason": "tool-loop"}
                events.append({"type": "tool_result", **base, "result": text("blocked", **veto)})
            elif "error" in call:
                events.append({"type": "tool_result", **base, "error": call["error"]})
            elif "result" in call:  # (a call without either stays pending: no outcome is recorded)
                events.append({"type": "tool_result", **base, "result": call["result"]})
    return events
