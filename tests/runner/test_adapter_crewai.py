"""CrewAI + LoopwardenCrewHooks, a scripted CrewAI model (a ``BaseLLM`` making native tool calls), real worker
on Tansu.

CrewAI conflicts with the dev extra (its pydantic, openai, OpenTelemetry and MCP pins), so the crew runs in a
driver process (tests/support/drivers/crewai_agent.py) on a venv of its own (tests/frameworks.py).
"""

from __future__ import annotations

import pytest

from tests.frameworks import framework_python
from tests.runner.adapter_cases import (
    BLOCK_TEXT,
    GUARD_WINDOW,
    PINGPONG_CALLS,
    REPEATS,
    assert_pingpong_outcome,
    assert_progress_outcome,
    assert_repeat_outcome,
    client_spec,
    closed_port_spec,
    pingpong_args,
    repeat_turns,
    worker_fixture,
)
from tests.runner.framework_runs import run_driver

pytestmark = pytest.mark.integration
worker = worker_fixture("crewai")
DRIVER = "crewai_agent.py"


@pytest.fixture(scope="module")
def python():
    return framework_python("crewai")


def ordered(run: dict, n: int) -> list[str]:
    return [run["texts"][f"call_{i}"] for i in range(n)]


def test_repeat_loop_is_blocked_at_call_21(python, tansu, worker):
    out = run_driver(python, DRIVER, client_spec(tansu, worker), [(repeat_turns(REPEATS), "pending")])
    run, s = out["runs"][0], out["stats"]
    assert_repeat_outcome(ordered(run, REPEATS), run["tool_runs"])
    assert run["final"] == "giving up" and run["error"] is None  # a block does not end the run
    assert (s["checks"], s["blocked"], s["warned"], s["fail_open"]) == (REPEATS, REPEATS - 20, 1, 0)
    assert s["acks_sent"] == 1 + (REPEATS - 20)


def test_ping_pong_is_warned_at_10_and_blocked_at_20(python, tansu, worker):
    turns = repeat_turns(PINGPONG_CALLS, pingpong_args)
    run = run_driver(python, DRIVER, client_spec(tansu, worker), [(turns, "pending")])["runs"][0]
    assert_pingpong_outcome(ordered(run, PINGPONG_CALLS), run["tool_runs"])


def test_a_poll_with_progress_is_never_blocked(python, tansu, worker):
    out = run_driver(python, DRIVER, client_spec(tansu, worker), [(repeat_turns(REPEATS), "progress")])
    run = out["runs"][0]
    assert_progress_outcome(ordered(run, REPEATS), run["tool_runs"])
    assert run["final"] == "giving up" and out["stats"]["blocked"] == 0


def test_compaction_loop_ends_the_kickoff(python, tansu, worker):
    turns = repeat_turns(8, lambda i: {"q": "huge.log"})
    out = run_driver(python, DRIVER, client_spec(tansu, worker), [(turns, "pending")], compaction=True)
    run = out["runs"][0]
    # decided locally on the third outcome: the next model request is refused, the kickoff fails
    assert run["tool_runs"] == GUARD_WINDOW and run["requests"] == GUARD_WINDOW
    assert run["error"] == "LLMCallBlockedError" and run["final"] == ""
    assert run["abort"] == "compaction_loop_persisted" and out["stats"]["acks_sent"] == 1


def test_tool_errors_are_published_as_errors(python, tansu, worker):
    out = run_driver(python, DRIVER, client_spec(tansu, worker), [(repeat_turns(2, lambda i: {"q": "x"}), "fail")])
    run = out["runs"][0]
    assert run["tool_runs"] == 2 and run["final"] == "giving up"  # CrewAI hands the model the error text
    assert out["errors"] == ['"backend down"'] * 2


def test_broker_down_calls_go_ahead(python):
    out = run_driver(python, DRIVER, closed_port_spec(), [(repeat_turns(REPEATS, lambda i: {"q": "x"}), "pending")])
    run, s = out["runs"][0], out["stats"]
    assert run["tool_runs"] == REPEATS and run["final"] == "giving up"
    assert s["fail_open"] == REPEATS and s["start_errors"] == 1
    assert not any(BLOCK_TEXT in text for text in run["texts"].values())


def test_two_concurrent_invocations_with_colliding_call_ids(python, tansu, worker):
    loop, walk = repeat_turns(REPEATS), repeat_turns(REPEATS, lambda i: {"q": f"job {i}"})
    out = run_driver(python, DRIVER, client_spec(tansu, worker), [(loop, "pending"), (walk, "pending")])
    a, b = out["runs"]
    assert_repeat_outcome(ordered(a, REPEATS), a["tool_runs"])
    assert b["tool_runs"] == REPEATS
    assert all("[loopwarden]" not in t and BLOCK_TEXT not in t for t in b["texts"].values())


def test_crewai_own_stopper_ends_a_loop_at_5(python, tansu, worker, monkeypatch):
    """CrewAI's own rule (5 identical calls with identical results) ends the kickoff before loopwarden's
    warning: the adapter lets it be (every call gated, none blocked)."""
    monkeypatch.setenv("LW_CREWAI_OWN_STOPPER", "1")
    out = run_driver(python, DRIVER, client_spec(tansu, worker), [(repeat_turns(REPEATS), "pending")])
    run = out["runs"][0]
    assert run["tool_runs"] == 5 and run["error"] == "ToolExecutionFailedError"
    assert out["stats"]["checks"] == 5 and out["stats"]["blocked"] == 0
