"""``loopwarden bench fingerprint``: what the fleet's failure fingerprint costs, per outcome and per event.

Per outcome: ``fingerprint()`` of failure outputs shaped like real ones (a missing file, a
refused connection, an npm error, a Python traceback, a pytest failure; 100 B to 3 KB, each
with its own machine's paths, ids and times) and of 8 KB of hostile text (the most a
fingerprint reads). Per event: ``loopwarden replay --incidents`` over a fleet trace whose failing
runs print such outputs, with incidents and crossRun on, ``fingerprint: "normalized"`` against
``"exact"`` and against the extensions off (decode, ``step()`` and the fleet side together).
Best of ``--repeat`` passes.
"""

from __future__ import annotations

import json
import time

import msgspec

from loopwarden.schemas.config import FleetConfig


def outputs(machine: int) -> list[str]:
    """One machine's outputs of five failures (its workspace, ids, times and pids are its own)."""
    ws = f"/srv/agents/agent-{machine}/ws-{machine * 7919:x}"
    stamp = f"2026-12-06T03:{machine % 60:02d}:{machine % 50 + 10}.{machine * 37 % 1000:03d}Z"
    frames = "".join(
        f'  File "/usr/lib/python3.11/site-packages/pkg/mod{i}.py", line {100 + i}, in call{i}\n    step{i}()\n'
        for i in range(20)
    )
    return [
        f"ENOENT: no such file or directory, open '{ws}/data/input.csv'",
        f"curl: (7) Failed to connect to 127.0.0.1 port {40000 + machine} after {machine % 9} ms: Couldn't connect",
        'npm error Missing script: "build"\nnpm error\nnpm error To see a list of scripts, run:\nnpm error   npm run\n'
        f"npm error A complete log of this run can be found in: /home/u{machine}/.npm/_logs/{stamp}-debug-0.log\n",
        f'Traceback (most recent call last):\n{frames}  File "{ws}/orders.py", line 9, in <module>\n'
        f"KeyError: 'user_id' (request_id=req_{machine:04d}f8a9c2e1b7d4, pid {4000 + machine})\n",
        f"rootdir: {ws}\ncollected 1 item\n\ntests/test_cart.py F\n" + "=" * 70 + "\n"
        "E assert 4 == 5\ntests/test_cart.py:6: AssertionError\n"
        f"FAILED tests/test_cart.py::test_total - assert 4 == 5\n1 failed in {machine % 7}.{machine % 97:02d}s\n",
    ]


HOSTILE = ["a-" * 4096, "/a" * 4096, "1" * 8192, "f" * 8191 + "g", "\n".join(["x" * 300] * 40)]


def per_outcome(texts: list[str], repeat: int) -> float:
    from loopwarden.fleet.fingerprint import fingerprint

    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for text in texts:
            fingerprint("exec", text)
        best = min(best, time.perf_counter() - start)
    return round(best / len(texts) * 1e6, 1)


def fleet_trace(runs: int, calls: int) -> list[str]:
    """``runs`` runs of 3 agents, each looping ``calls`` times on one of the failures, machine by machine."""
    lines = []
    for r in range(runs):
        for c in range(calls):
            base = {
                "agent_id": f"agent-{r % 3}",
                "session_id": f"s{r}",
                "run_id": f"run{r}",
                "ts": 1000.0 + r + c / 100,
            }
            call = {**base, "tool_name": "exec", "tool_call_id": f"{r}-{c}", "params": {"command": f"step {c}"}}
            error = outputs(r * calls + c)[r % 5]
            lines += [
                json.dumps({"type": "tool_call", **call}),
                json.dumps({"type": "tool_result", **call, "error": error}),
            ]
        lines.append(
            json.dumps({"type": "run_end", "agent_id": f"agent-{r % 3}", "session_id": f"s{r}", "run_id": f"run{r}"})
        )
    return lines


def per_event(trace: list[str], doc: dict, repeat: int) -> tuple[float, int]:
    from loopwarden.replay import replay_lines

    fleet = FleetConfig.from_document(doc)
    best, incidents = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        rows = list(replay_lines(trace, fleet, incidents=True))
        best = min(best, time.perf_counter() - start)
        incidents = sum(1 for r in rows if isinstance(r, dict) and r.get("type") == "incident" and r["state"] == "open")
    return round(best / len(trace) * 1e6, 2), incidents


def bench_fingerprint(runs: int, repeat: int) -> dict:
    real = [text for m in range(40) for text in outputs(m)]
    loop = {"tools": {"loopDetection": {"enabled": True}}}
    on = {"incidents": {"enabled": True}, "crossRun": {"enabled": True}}
    trace = fleet_trace(runs, 6)
    off_us, _ = per_event(trace, loop, repeat)
    exact_us, exact_open = per_event(trace, {**loop, "loopwarden": {**on, "fleet": {"fingerprint": "exact"}}}, repeat)
    norm_us, norm_open = per_event(trace, {**loop, "loopwarden": on}, repeat)
    return {
        "outcome_us": per_outcome(real, repeat),
        "outcome_mean_chars": round(sum(map(len, real)) / len(real)),
        "hostile_8k_us": per_outcome(HOSTILE, repeat),
        "events": len(trace),
        "event_us_extensions_off": off_us,
        "event_us_exact": exact_us,
        "event_us_normalized": norm_us,
        "normalized_vs_exact": round(norm_us / exact_us, 2),
        "incidents_opened_exact": exact_open,
        "incidents_opened_normalized": norm_open,
    }


def add_arguments(p) -> None:
    p.add_argument("--runs", type=int, default=300, help="failing runs in the fleet trace (6 calls each)")
    p.add_argument("--repeat", type=int, default=5, help="timed passes; the best is reported")


def run(args) -> int:
    print(msgspec.json.format(msgspec.json.encode(bench_fingerprint(args.runs, args.repeat))).decode())
    return 0
