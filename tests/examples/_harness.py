"""Shared by the framework examples: an embedded broker, a worker, a client, then the agent.

Each example is one command (``python tests/examples/<framework>_agent.py``);
this runs its ``agent(client)`` coroutine against a real worker with
OpenClaw's defaults (warn at 10 identical calls, block at 20).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}


async def _main(agent: Callable[[Any], Awaitable[None]], tag: str, config: dict | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import msgspec

    from loopwarden.devtools.broker import EmbeddedBroker
    from loopwarden.devtools.processes import TopicNames, WorkerProcess
    from loopwarden.runner import LoopClient

    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        path = Path(tmp) / "loop.json"
        path.write_text(json.dumps(config or CONFIG))
        names = TopicNames(f"{tag}-{uuid.uuid4().hex[:6]}")
        worker = WorkerProcess(broker.url, Path(tmp) / "data", names=names, config=path)
        worker.start()
        try:
            worker.wait_ready()
            async with LoopClient(
                bootstrap=broker.bootstrap, events_topic=names.events, control_topic=names.control
            ) as client:
                await agent(client)
                print(json.dumps({k: v for k, v in msgspec.structs.asdict(client.stats).items() if v}))
        finally:
            worker.stop()
    return 0


def run(agent: Callable[[Any], Awaitable[None]], tag: str, config: dict | None = None) -> None:
    """Run ``agent(client)`` against a fresh broker and worker (``config``: the worker's, default CONFIG)."""
    sys.exit(asyncio.run(_main(agent, tag, config)))


def show(i: int, text: str) -> None:
    print(f"call {i + 1:>2}: {' '.join(text.split())[:110]}")
