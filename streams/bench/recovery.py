"""``loopwarden bench recovery``: what the release's batch admission costs a runner deciding locally.

Under the openclaw-latest profile a runner decides one model message's tool
calls together (``LoopClient.check_batch``): a copy of the run's state, each
call decided on it, the copy kept. Timed per call, against ``check()`` of the
same calls one by one under the default rules, in the same run, on a run
with a full window (30 records), no broker.
"""

from __future__ import annotations

import asyncio
import time

import msgspec

BASE = {"tools": {"loopDetection": {"enabled": True}}}
PROFILE = {**BASE, "loopwarden": {"profile": "openclaw-latest"}}


async def _per_call(config: dict, batches: int, size: int, together: bool) -> float:
    from loopwarden.runner import LoopClient

    client = LoopClient(config=config, decisions="local")
    n = 0
    start = time.perf_counter()
    for b in range(batches):
        run = client.run("bench", session_id="s", run_id=f"r{b // 20}")  # a new run every 20 batches
        calls = [run.call("read", {"path": f"f{(b + i) % 7}.md"}, f"c{b}-{i}") for i in range(size)]
        decisions = await client.check_batch(calls) if together else [await client.check(c) for c in calls]
        for d in decisions:
            if d.proceed:
                await client.tool_result(d, result={"content": [{"type": "text", "text": "same"}]})
            n += 1
    return (time.perf_counter() - start) / n * 1e6


def bench_recovery(batches: int, size: int) -> dict:
    default = asyncio.run(_per_call(BASE, batches, size, False))
    admitted = asyncio.run(_per_call(PROFILE, batches, size, True))
    return {
        "batches": batches,
        "calls_per_batch": size,
        "default_check_us_per_call": round(default, 1),
        "profile_batch_us_per_call": round(admitted, 1),
        "profile_vs_default": round(admitted / default, 2),
    }


def add_arguments(p) -> None:
    p.add_argument("--batches", type=int, default=2000, help="assistant batches timed")
    p.add_argument("--size", type=int, default=3, help="tool calls per batch")


def run(args) -> int:
    print(msgspec.json.format(msgspec.json.encode(bench_recovery(max(1, args.batches), max(1, args.size)))).decode())
    return 0
