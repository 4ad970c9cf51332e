"""LlamaIndex FunctionAgent + LoopwardenTools, llama-index-core's MockFunctionCallingLLM, real worker on Tansu."""

from __future__ import annotations

import asyncio
import uuid

import pytest

pytest.importorskip("llama_index.core.agent.workflow")

from llama_index.core.agent.workflow import FunctionAgent  # noqa: E402
from llama_index.core.base.llms.types import ToolCallBlock  # noqa: E402
from llama_index.core.llms import ChatMessage  # noqa: E402
from llama_index.core.llms.mock import MockFunctionCallingLLM  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402
from workflows.errors import WorkflowCancelledByUser  # noqa: E402

from loopwarden.runner.integrations.llama_index import LoopwardenTools  # noqa: E402
from loopwarden.runner.wire import RunRef  # noqa: E402
from tests.runner.adapter_cases import (  # noqa: E402
    BLOCK_TEXT,
    GUARD_WINDOW,
    PINGPONG_CALLS,
    REPEATS,
    assert_pingpong_outcome,
    assert_progress_outcome,
    assert_repeat_outcome,
    client_for,
    closed_port_client,
    pingpong_args,
    progress_output,
    repeat_turns,
    rid,
    worker_fixture,
)

pytestmark = pytest.mark.integration
worker = worker_fixture("li")


def scripted(turns: list) -> tuple[MockFunctionCallingLLM, list]:
    """llama-index-core's mock function-calling model answering each request with the next turn's calls."""
    requests: list = []

    def respond(messages, **kwargs):
        requests.append(messages)
        i = len(requests) - 1
        if i < len(turns):
            blocks = [ToolCallBlock(tool_call_id=c, tool_name=n, tool_kwargs=a) for n, a, c in turns[i]]
            return ChatMessage(role="assistant", blocks=blocks)
        return ChatMessage(role="assistant", content="giving up")

    return MockFunctionCallingLLM(response_generator=respond), requests


def agent_for(turns: list, lw: LoopwardenTools, behaviour: str = "pending") -> tuple[FunctionAgent, list, list]:
    runs: list = []

    async def lookup(q: str) -> str:
        """Look something up."""
        runs.append(q)
        await asyncio.sleep(0.005)  # a tool that awaits: concurrent runs interleave here
        if behaviour == "fail":
            raise RuntimeError("backend down")
        return progress_output(len(runs)) if behaviour == "progress" else "status: pending"

    llm, requests = scripted(turns)
    return FunctionAgent(llm=llm, tools=lw.wrap([lookup]), name="li_agent"), runs, requests


async def run_agent(lw: LoopwardenTools, agent: FunctionAgent, **kwargs) -> tuple[dict[str, str], str]:
    """One run; what the model got for each call id (the agent's memory), and the final answer."""
    memory = Memory.from_defaults(token_limit=10**7)  # every result stays readable
    final = str(await lw.run(agent, "poll the job", memory=memory, max_iterations=100, **kwargs))
    texts = {
        m.additional_kwargs.get("tool_call_id"): str(m.content) for m in await memory.aget_all() if m.role == "tool"
    }
    return texts, final


def ordered(texts: dict[str, str], n: int) -> list[str]:
    return [texts[f"call_{i}"] for i in range(n)]


async def test_repeat_loop_is_blocked_at_call_21(tansu, worker):
    async with client_for(tansu, worker) as client:
        lw = LoopwardenTools(client, timeout=10.0)
        agent, runs, _ = agent_for(repeat_turns(REPEATS), lw)
        texts, final = await run_agent(lw, agent, session_id=rid("li"))
        assert_repeat_outcome(ordered(texts, REPEATS), len(runs))
        assert final == "giving up"  # a block does not end the run
        s = client.stats
        assert (s.checks, s.blocked, s.warned, s.fail_open) == (REPEATS, REPEATS - 20, 1, 0)
        assert s.acks_sent == 1 + (REPEATS - 20)


async def test_ping_pong_is_warned_at_10_and_blocked_at_20(tansu, worker):
    async with client_for(tansu, worker) as client:
        lw = LoopwardenTools(client)
        agent, runs, _ = agent_for(repeat_turns(PINGPONG_CALLS, pingpong_args), lw)
        texts, _ = await run_agent(lw, agent, session_id=rid("li-pp"))
        assert_pingpong_outcome(ordered(texts, PINGPONG_CALLS), len(runs))


async def test_a_poll_with_progress_is_never_blocked(tansu, worker):
    async with client_for(tansu, worker) as client:
        lw = LoopwardenTools(client)
        agent, runs, _ = agent_for(repeat_turns(REPEATS), lw, "progress")
        texts, final = await run_agent(lw, agent, session_id=rid("li-progress"))
        assert_progress_outcome(ordered(texts, REPEATS), len(runs))
        assert final == "giving up" and client.stats.blocked == 0


async def test_compaction_loop_cancels_the_run(tansu, worker):
    async with client_for(tansu, worker) as client:
        lw = LoopwardenTools(client, timeout=10.0)
        agent, runs, requests = agent_for(repeat_turns(8, lambda i: {"q": "huge.log"}), lw)
        ref = RunRef(agent_id="li_agent", session_id=rid("li-compact"), run_id=uuid.uuid4().hex)
        await lw.compaction_retry(ref, "overflow")  # the run's history was compacted before it (re)started
        with pytest.raises(WorkflowCancelledByUser):
            await run_agent(lw, agent, session_id=ref.session_id, run_id=ref.run_id)
        # decided locally on the third output: cancelled right after it, the model not asked again
        assert len(runs) == GUARD_WINDOW and len(requests) == GUARD_WINDOW
        assert lw.gate.aborted(ref).detector == "compaction_loop_persisted" and client.stats.acks_sent == 1


async def test_tool_errors_are_published_as_errors(tansu, worker):
    async with client_for(tansu, worker) as client:
        errors: list = []
        tool_result = client.tool_result

        async def spy(*args, **kwargs):
            event = await tool_result(*args, **kwargs)
            if event.error:
                errors.append(bytes(event.error))
            return event

        client.tool_result = spy
        lw = LoopwardenTools(client, timeout=10.0)
        agent, runs, _ = agent_for(repeat_turns(2, lambda i: {"q": "x"}), lw, "fail")
        texts, final = await run_agent(lw, agent, session_id=rid("li-error"))
        assert len(runs) == 2 and final == "giving up"  # LlamaIndex hands the model an error output
        assert errors == [b'"RuntimeError: backend down"'] * 2
        assert all("backend down" in t for t in texts.values())


async def test_broker_down_calls_go_ahead():
    async with closed_port_client() as client:
        lw = LoopwardenTools(client)
        agent, runs, _ = agent_for(repeat_turns(REPEATS, lambda i: {"q": "x"}), lw)
        texts, final = await run_agent(lw, agent)
        assert len(runs) == REPEATS and final == "giving up"
        assert client.stats.fail_open == REPEATS and client.stats.start_errors == 1
        assert not any(BLOCK_TEXT in text for text in texts.values())


async def test_two_concurrent_runs_with_colliding_call_ids(tansu, worker):
    async with client_for(tansu, worker) as client:
        lw = LoopwardenTools(client)
        loop_agent, loop_runs, _ = agent_for(repeat_turns(REPEATS), lw)
        walk_agent, walk_runs, _ = agent_for(repeat_turns(REPEATS, lambda i: {"q": f"job {i}"}), lw)
        thread = rid("li-pair")
        (a, _), (b, _) = await asyncio.gather(
            run_agent(lw, loop_agent, session_id=thread), run_agent(lw, walk_agent, session_id=thread)
        )
        assert_repeat_outcome(ordered(a, REPEATS), len(loop_runs))
        assert len(walk_runs) == REPEATS
        assert all("[loopwarden]" not in t and BLOCK_TEXT not in t for t in b.values())
