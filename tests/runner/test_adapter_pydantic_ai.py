"""PydanticAI + LoopwardenCapability, pydantic-ai's FunctionModel, real worker on Tansu."""

from __future__ import annotations

import asyncio
import uuid

import pytest

pytest.importorskip("pydantic_ai.capabilities")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.capabilities import AbstractCapability  # noqa: E402
from pydantic_ai.exceptions import RunCancelled  # noqa: E402
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import FunctionModel  # noqa: E402

from loopwarden.runner.integrations.pydantic_ai import LoopwardenCapability  # noqa: E402
from loopwarden.runner.wire import RunRef  # noqa: E402
from tests.runner.adapter_cases import (
    BLOCK_TEXT,
    GUARD_WINDOW,
    PARALLEL_TURNS,
    REPEATS,
    STOP_TURN,
    assert_recovery_outcome,
    assert_repeat_outcome,
    client_for,  # noqa: E402
    closed_port_client,
    parallel_calls,
    profile_client,
    rid,
    worker_fixture,
)

pytestmark = pytest.mark.integration
worker = worker_fixture("pa")


def scripted(n: int, args: dict, vary: bool = False) -> tuple[FunctionModel, list]:
    """A model that asks for the same call ``n`` times (``vary``: other arguments each time), then
    answers; records each request."""
    requests: list = []

    def respond(messages, info):
        requests.append(messages)
        i = len(requests) - 1
        if i < n:
            call_args = {k: f"{v} {i}" for k, v in args.items()} if vary else args
            return ModelResponse(parts=[ToolCallPart("lookup", call_args, tool_call_id=f"call_{i}")])
        return ModelResponse(parts=[TextPart("giving up")])

    return FunctionModel(respond), requests


def agent_for(model: FunctionModel, *capabilities) -> tuple[Agent, list]:
    runs: list = []
    agent = Agent(model, name="pa-agent", capabilities=list(capabilities))

    @agent.tool_plain
    async def lookup(q: str) -> str:
        """Look something up."""
        runs.append(q)
        await asyncio.sleep(0.005)  # a tool that awaits: concurrent runs interleave here
        return "status: pending"

    return agent, runs


def returns(messages) -> dict[str, str]:
    return {
        part.tool_call_id: part.model_response_str()
        for m in messages
        for part in m.parts
        if isinstance(part, ToolReturnPart)
    }


async def test_repeat_loop_is_blocked_at_call_21(tansu, worker):
    model, _requests = scripted(REPEATS, {"q": "job 42"})
    async with client_for(tansu, worker) as client:
        lw = LoopwardenCapability(client, timeout=10.0)
        agent, runs = agent_for(model, lw)
        result = await agent.run("poll the job", conversation_id=rid("pa-thread"))
        out = returns(result.all_messages())
        assert_repeat_outcome([out[f"call_{i}"] for i in range(REPEATS)], len(runs))
        assert result.output == "giving up"  # a block does not end the run
        s = client.stats
        assert (s.checks, s.blocked, s.warned, s.fail_open) == (REPEATS, REPEATS - 20, 1, 0)
        assert s.acks_sent == 1 + (REPEATS - 20)


class Compacted(AbstractCapability):
    """Stands in for a history compaction at the start of the run: tells loopwarden."""

    def __init__(self, lw: LoopwardenCapability) -> None:
        self.lw = lw

    async def before_run(self, ctx) -> None:
        await self.lw.compaction_retry(ctx, "overflow")


async def test_compaction_loop_ends_the_run_by_abort(tansu, worker):
    model, requests = scripted(8, {"q": "huge.log"})
    async with client_for(tansu, worker) as client:
        lw = LoopwardenCapability(client, timeout=10.0)
        agent, runs = agent_for(model, lw, Compacted(lw))
        conversation, run_id = rid("pa-compact"), uuid.uuid4().hex
        with pytest.raises(RunCancelled):
            await agent.run("read the log", conversation_id=conversation, run_id=run_id)
        # decided locally on the third outcome: cancelled right after it, the model not asked again
        assert len(runs) == GUARD_WINDOW and len(requests) == GUARD_WINDOW
        abort = lw.gate.aborted(RunRef(agent_id="any", session_id=conversation, run_id=run_id))
        assert abort.detector == "compaction_loop_persisted" and client.stats.acks_sent == 1


async def test_broker_down_calls_go_ahead():
    model, _requests = scripted(REPEATS, {"q": "x"})
    async with closed_port_client() as client:
        agent, runs = agent_for(model, LoopwardenCapability(client))
        result = await agent.run("go")
        assert len(runs) == REPEATS and result.output == "giving up"
        assert client.stats.fail_open == REPEATS and client.stats.start_errors == 1
        assert not any(BLOCK_TEXT in text for text in returns(result.all_messages()).values())


async def test_two_concurrent_runs_with_colliding_call_ids(tansu, worker):
    looping, _ = scripted(REPEATS, {"q": "job 42"})
    walking, _ = scripted(REPEATS, {"q": "job"}, vary=True)
    async with client_for(tansu, worker) as client:
        lw = LoopwardenCapability(client)
        loop_agent, loop_runs = agent_for(looping, lw)
        walk_agent, walk_runs = agent_for(walking, lw)
        conversation = rid("pa-pair")
        a, b = await asyncio.gather(
            loop_agent.run("poll", conversation_id=conversation),
            walk_agent.run("walk", conversation_id=conversation),
        )
        out = returns(a.all_messages())
        assert_repeat_outcome([out[f"call_{i}"] for i in range(REPEATS)], len(loop_runs))
        assert len(walk_runs) == REPEATS
        assert all("[loopwarden]" not in t and BLOCK_TEXT not in t for t in returns(b.all_messages()).values())


async def test_profile_parallel_calls_bounded_recovery():
    """openclaw-latest: each model response makes three parallel calls; the run's first critical refuses
    the whole batch before any call runs, the second cancels the run (RunCancelled)."""
    requests: list = []

    def respond(messages, info):
        requests.append(messages)
        turn = len(requests)
        if turn <= PARALLEL_TURNS:
            return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=i) for n, a, i in parallel_calls(turn)])
        return ModelResponse(parts=[TextPart("giving up")])

    agent, runs = agent_for(FunctionModel(respond), LoopwardenCapability(profile_client()))
    with pytest.raises(RunCancelled):
        await agent.run("poll the job", conversation_id=rid("pa-thread"))
    assert len(requests) == STOP_TURN  # no model request after the stopping batch
    assert_recovery_outcome(returns(requests[-1]), len(runs))
