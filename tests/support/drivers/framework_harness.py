"""What the adapter drivers that run in a framework's own venv share (tests/frameworks.py).

A driver reads one JSON scenario from stdin: ``client`` (LoopClient keyword
arguments), ``runs`` (each a script of model turns, every turn a list of
``[tool, args, call id]``, and the tool's behaviour: ``pending``, ``progress``
or ``fail``), ``compaction`` (report a compaction before the first model
request). It runs every run concurrently on one client and one adapter and
prints one JSON line: per run what the model got for each call id, how often
the tool ran, how many model requests were made, the final text and the abort
detector; and the client's counters and the errors it published.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from loopwarden.runner import LoopClient


def progress_output(n: int) -> str:
    return f"status: {10 * n} rows copied"  # tests/runner/adapter_cases.py's progress_output


def make_tool_body(behaviour: str, runs: list) -> Callable[[str], Awaitable[str]]:
    """The scripted tool: records each run, then answers as ``behaviour`` says."""

    async def body(q: str) -> str:
        runs.append(q)
        await asyncio.sleep(0.005)  # a tool that awaits: concurrent runs interleave here
        if behaviour == "fail":
            raise RuntimeError("backend down")
        return progress_output(len(runs)) if behaviour == "progress" else "status: pending"

    return body


async def drive(run_one: Callable[[LoopClient, Any, dict], Awaitable[dict]], make_adapter: Callable) -> None:
    """Run the scenario from stdin with ``run_one(client, adapter, run_spec)`` per run; print the outcome."""
    scenario = json.loads(sys.stdin.read())
    async with LoopClient(**scenario["client"]) as client:
        errors: list[str] = []
        tool_result = client.tool_result

        async def spy(*args: Any, **kwargs: Any) -> Any:
            event = await tool_result(*args, **kwargs)
            if event.error:
                errors.append(bytes(event.error).decode())
            return event

        client.tool_result = spy  # type: ignore[method-assign]
        adapter = make_adapter(client)
        for run in scenario["runs"]:
            run.setdefault("compaction", scenario.get("compaction", False))
        outcomes = await asyncio.gather(*(run_one(client, adapter, run) for run in scenario["runs"]))
        stats = {**msgspec.to_builtins(client.stats), "fail_open": client.stats.fail_open}
    print(json.dumps({"runs": outcomes, "stats": stats, "errors": errors}))
