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
from tests.support.live import WorkerProcess, ready_worker

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


def client_spec(tansu: str, worker: WorkerProcess, **overrides) -> dict:
    """``client_for``'s arguments, for a driver that makes its client in another process (JSON)."""
    names = worker.names
    overrides.setdefault("config", CONFIG)
    topics = {"events_topic": names.events, "control_topic": names.control, "config_topic": names.config}
    return {"bootstrap": tansu, **topics, **overrides}


def closed_port_spec() -> dict:
    return {"bootstrap": f"127.0.0.1:{free_port()}", "request_timeout_ms": 1000}


def profile_spec() -> dict:
    return {"config": PROFILE_CONFIG, "decisions": "local"}


def repeat_turns(n: int, args_of=lambda i: {"q": "job 42"}) -> list:
    """A script of ``n`` model turns, each one call of lookup (call ids ``call_0``...)."""
    return [[("lookup", args_of(i), f"call_{i}")] for i in range(n)]


def closed_port_client() -> LoopClient:
    """A client whose broker is down (nothing listens on the port)."""
    return LoopClient(bootstrap=f"127.0.0.1:{free_port()}", request_timeout_ms=1000)


def rid(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:10]}"


def assert_repeat_outcome(texts: list[str], tool_runs: int, tool: str = "lookup") -> None:
    """``texts``: what the model got as each of the 25 calls' results, in order (``tool``: the tool's
    name as the framework calls it)."""
    warn_text, block_text = WARN_TEXT.replace("lookup", tool), BLOCK_TEXT.replace("lookup", tool)
    assert tool_runs == RUNS_BEFORE_BLOCK
    assert len(texts) == REPEATS
    assert warn_text in texts[WARNED_CALL - 1] and all(
        warn_text not in t for i, t in enumerate(texts) if i != WARNED_CALL - 1
    )
    assert texts[RUNS_BEFORE_BLOCK].startswith(block_text)  # call 21
    assert all(t.startswith(block_text) for t in texts[RUNS_BEFORE_BLOCK:])  # a blocked call is not recorded


# ---- ping-pong: lookup(q="job 42") and lookup(q="job 43") in turn, each with the same outcome every time ----
PINGPONG_CALLS = 20
PINGPONG_WARN_TEXT = "WARNING: You are alternating between repeated tool-call patterns (10 consecutive calls)."
PINGPONG_BLOCK_TEXT = "CRITICAL: You are alternating between repeated tool-call patterns (20 consecutive calls)"


def pingpong_args(i: int) -> dict:
    """Call ``i``'s (0-based) arguments."""
    return {"q": "job 42" if i % 2 == 0 else "job 43"}


def assert_pingpong_outcome(texts: list[str], tool_runs: int) -> None:
    """``texts``: what the model got for each of the 20 alternating calls: warned at 10, blocked at 20."""
    assert len(texts) == PINGPONG_CALLS and tool_runs == PINGPONG_CALLS - 1
    assert PINGPONG_WARN_TEXT in texts[9] and all(PINGPONG_WARN_TEXT not in t for i, t in enumerate(texts) if i != 9)
    assert texts[-1].startswith(PINGPONG_BLOCK_TEXT)
    assert not any("CRITICAL" in t for t in texts[:-1])


# ---- a poll that makes progress: 25 identical calls whose output changes every time (never blocked) ----
def progress_output(n: int) -> str:
    """The polled tool's output on its ``n``-th (1-based) run."""
    return f"status: {10 * n} rows copied"


def assert_progress_outcome(texts: list[str], tool_runs: int) -> None:
    assert tool_runs == REPEATS and len(texts) == REPEATS
    assert all(progress_output(i + 1) in t for i, t in enumerate(texts))
    assert not any("CRITICAL" in t for t in texts)


def spy_results(client: LoopClient) -> list:
    """Every ``tool_result`` event the client publishes from now on (its ``tool_result`` wrapped)."""
    sent: list = []
    tool_result = client.tool_result

    async def spy(*args, **kwargs):
        event = await tool_result(*args, **kwargs)
        sent.append(event)
        return event

    client.tool_result = spy  # type: ignore[method-assign]
    return sent


def tool_errors(sent: list) -> list[bytes]:
    """The ``error`` of each published tool result that has one."""
    return [bytes(e.error) for e in sent if e.error]


def acks(stats) -> int:
    return stats.acks_sent


# ---- the openclaw-latest profile: the OpenClaw release's bounded recovery with parallel tool calls ----
# Each model message calls lookup(q="job 42") twice and a fresh lookup; the same calls in a live OpenClaw
# turn (tests/detection/test_openclaw_release_live.py) warn on turn 6, refuse turn 11's whole batch and
# stop the run on turn 12.
PROFILE_CONFIG = {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"profile": "openclaw-latest"}}
PARALLEL_TURNS = 14  # the script's length: more than the run gets
RECOVERY_TURN, STOP_TURN, WARN_TURN = 11, 12, 6
RELEASE_NOTE = (
    "[System note: Tool-loop warning after 10 repeated calls. "
    "Change your approach or stop if you are not making progress.]"
)
TRIGGER_TEXT = (
    "CRITICAL: Called lookup with identical outcomes 20 times. Session execution blocked to prevent runaway loops."
    "\n\nDo not repeat this exact tool action. Reassess the task. You may answer the user, ask for clarification, "
    "or continue with a different tool or different arguments."
)
SIBLING_TEXT = (
    "This tool was not executed because another call in the batch triggered critical tool-loop recovery. "
    "Reassess the task before choosing the next action."
)
TERMINAL_TEXT = (
    "Critical tool-loop recovery failed because another critical loop was detected. This run is stopping now."
)
TERMINAL_SIBLING_TEXT = (
    "This tool was not executed because another call in the batch repeated a critical tool loop. "
    "This run is stopping now."
)


def parallel_calls(turn: int) -> list[tuple[str, dict, str]]:
    """Turn ``turn``'s (1-based) three calls: (tool, args, call id)."""
    return [
        ("lookup", {"q": "job 42"}, f"t{turn}a"),
        ("lookup", {"q": "job 42"}, f"t{turn}b"),
        ("lookup", {"q": f"note {turn}"}, f"t{turn}c"),
    ]


def profile_client() -> LoopClient:
    """A runner deciding locally under the profile. Local decisions need no broker, so it is not started:
    its events are counted as unsent, and no worker's audit can correct a decision mid-test."""
    return LoopClient(config=PROFILE_CONFIG, decisions="local")


def assert_recovery_outcome(texts: dict[str, str], tool_runs: int) -> None:
    """``texts``: call id -> what the model got for it (calls of turns the run reached)."""
    assert tool_runs == 3 * (RECOVERY_TURN - 1)
    for turn in range(1, RECOVERY_TURN):
        for _, _, cid in parallel_calls(turn):
            noted = turn == WARN_TURN and cid.endswith("a")
            assert (RELEASE_NOTE in texts[cid]) == noted, (cid, texts[cid])
    a, b, c = (cid for _, _, cid in parallel_calls(RECOVERY_TURN))
    assert texts[a] == TRIGGER_TEXT
    assert texts[b] == texts[c] == SIBLING_TEXT
    stop = [cid for _, _, cid in parallel_calls(STOP_TURN)]
    if stop[0] in texts:  # frameworks that show the stopping batch's results before they end the run
        assert texts[stop[0]].startswith("CRITICAL: Called lookup with identical outcomes 20 times.")
        assert texts[stop[0]].endswith(TERMINAL_TEXT)
        assert texts[stop[1]] == texts[stop[2]] == TERMINAL_SIBLING_TEXT
    assert not any(cid in texts for _, _, cid in parallel_calls(STOP_TURN + 1))
