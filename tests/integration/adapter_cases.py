"""What every framework adapter's end-to-end test checks, against a real worker on Tansu.

The worker runs OpenClaw's defaults with ``tools.loopDetection.enabled``:
warning at 10 identical calls, critical (block) at 20 identical calls with
identical outcomes, post-compaction guard window 3. A scripted model that
calls one tool with the same arguments 25 times must see it run 20 times,
the warning appended to call 11's result and the block message as call 21's.
"""

from __future__ import annotations

import uuid

import pytest

from loopwarden.devtools.broker import free_port
from loopwarden.runner import LoopClient

from .support import WorkerProcess, ready_worker

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}
REPEATS = 25
RUNS_BEFORE_BLOCK = 20
WARNED_CALL = 11  # 1-based: the call the warning is delivered with
BLOCK_TEXT = "CRITICAL: Called lookup with identical arguments and identical outcomes 20 times."
WARN_TEXT = "WARNING: You have called lookup 10 times with identical arguments."
GUARD_WINDOW = 3


def worker_fixture(tag: str):
    """A module-scoped worker (its start dominates): each test uses fresh run ids."""

    @pytest.fixture(scope="module")
    def adapter_worker(tansu, tmp_path_factory):
        yield from ready_worker(tansu, tmp_path_factory.mktemp(f"{tag}-worker"), tag, CONFIG)

    return adapter_worker


def client_for(tansu: str, worker: WorkerProcess, **overrides) -> LoopClient:
    """A client deciding locally with the worker's config (the default for a runner that has it);
    ``decisions="worker"`` for gate round trips."""
    names = worker.names
    overrides.setdefault("config", CONFIG)
    return LoopClient(
        bootstrap=tansu,
        events_topic=names.events,
        control_topic=names.control,
        config_topic=names.config,
        **overrides,
    )


def closed_port_client() -> LoopClient:
    """A client whose broker is down (nothing listens on the port)."""
    return LoopClient(bootstrap=f"127.0.0.1:{free_port()}", request_timeout_ms=1000)


def rid(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:10]}"


def assert_repeat_outcome(texts: list[str], tool_runs: int) -> None:
    """``texts``: what the model got as each of the 25 calls' results, in order."""
    assert tool_runs == RUNS_BEFORE_BLOCK
    assert len(texts) == REPEATS
    assert WARN_TEXT in texts[WARNED_CALL - 1] and all(
        WARN_TEXT not in t for i, t in enumerate(texts) if i != WARNED_CALL - 1
    )
    assert texts[RUNS_BEFORE_BLOCK].startswith(BLOCK_TEXT)  # call 21
    assert all(t.startswith(BLOCK_TEXT) for t in texts[RUNS_BEFORE_BLOCK:])  # a blocked call is not recorded


def acks(stats) -> int:
    return stats.acks_sent
