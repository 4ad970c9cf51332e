"""OpenAI Agents SDK + loopwarden guardrails, the SDK's ScriptedModel, real worker on Tansu."""

from __future__ import annotations

import asyncio
import uuid

import pytest

pytest.importorskip("agents.testing")

from agents import (  # noqa: E402
    Agent,
    RunConfig,
    Runner,
    ToolInputGuardrailTripwireTriggered,
    function_tool,
)
from agents.items import ToolCallOutputItem  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

from loopwarden.runner.integrations.openai_agents import guard_agent  # noqa: E402
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
    spy_results,
    tool_errors,
    worker_fixture,
)

pytestmark = pytest.mark.integration
worker = worker_fixture("oa")


def scripted(n: int, args: dict) -> ScriptedModel:
    steps = [[function_call("lookup", args, call_id=f"call_{i}")] for i in range(n)]
    return ScriptedModel([*steps, [assistant_message("giving up")]])


def agent_with_counting_tool(model: ScriptedModel, fail: bool = False) -> tuple[Agent, list]:
    runs: list = []

    @function_tool
    async def lookup(q: str) -> str:
        """Look something up."""
        runs.append(q)
        await asyncio.sleep(0.005)  # a tool that awaits: concurrent runs interleave here
        if fail:
            raise RuntimeError("backend down")
        return "status: pending"

    return Agent(name="oa-agent", tools=[lookup], model=model), runs


def run_config(thread: str) -> tuple[RunConfig, str]:
    trace_id = f"trace_{uuid.uuid4().hex}"
    return RunConfig(group_id=thread, trace_id=trace_id, tracing_disabled=True), trace_id


def outputs(result) -> dict[str, str]:
    return {
        item.raw_item["call_id"]: str(item.output) for item in result.new_items if isinstance(item, ToolCallOutputItem)
    }


async def test_repeat_loop_is_blocked_at_call_21(tansu, worker):
    agent, runs = agent_with_counting_tool(scripted(REPEATS, {"q": "job 42"}))
    async with client_for(tansu, worker) as client:
        lw = guard_agent(agent, client, timeout=10.0)
        config, _trace = run_config(rid("oa-thread"))
        result = await Runner.run(agent, "poll the job", run_config=lw.run_config(config), max_turns=REPEATS + 5)
        out = outputs(result)
        assert_repeat_outcome([out[f"call_{i}"] for i in range(REPEATS)], len(runs))
        assert result.final_output == "giving up"  # a block does not end the run
        s = client.stats
        assert (s.checks, s.blocked, s.warned, s.fail_open) == (REPEATS, REPEATS - 20, 1, 0)
        assert s.acks_sent == 1 + (REPEATS - 20)


async def test_compaction_loop_ends_the_run_by_abort(tansu, worker):
    model = scripted(8, {"q": "huge.log"})
    agent, runs = agent_with_counting_tool(model)
    async with client_for(tansu, worker) as client:
        lw = guard_agent(agent, client, timeout=10.0)
        thread = rid("oa-compact")
        config, trace_id = run_config(thread)
        await lw.compaction_retry(RunRef(agent_id="oa-agent", session_id=thread, run_id=trace_id), "overflow")
        with pytest.raises(ToolInputGuardrailTripwireTriggered) as info:
            await Runner.run(agent, "read the log", run_config=lw.run_config(config), max_turns=20)
        decision = info.value.output.output_info
        assert decision.action == "abort" and decision.verdict.detector == "compaction_loop_persisted"
        assert decision.call.tool_call_id == f"call_{GUARD_WINDOW}"
        assert len(runs) == GUARD_WINDOW and len(model.calls) == GUARD_WINDOW + 1
        assert client.stats.acks_sent == 1


async def test_tool_errors_are_published_as_errors(tansu, worker):
    agent, runs = agent_with_counting_tool(scripted(2, {"q": "x"}), fail=True)
    async with client_for(tansu, worker) as client:
        lw = guard_agent(agent, client, timeout=10.0)
        sent = spy_results(client)  # a locally deciding client queues results past ``publish``
        config, _trace = run_config(rid("oa-error"))
        result = await Runner.run(agent, "go", run_config=lw.run_config(config), max_turns=5)
        assert len(runs) == 2 and result.final_output == "giving up"
        assert tool_errors(sent) == [b'"RuntimeError: backend down"'] * 2


async def test_broker_down_calls_go_ahead():
    agent, runs = agent_with_counting_tool(scripted(REPEATS, {"q": "x"}))
    async with closed_port_client() as client:
        lw = guard_agent(agent, client)
        config, _trace = run_config(rid("oa-open"))
        result = await Runner.run(agent, "go", run_config=lw.run_config(config), max_turns=REPEATS + 5)
        assert len(runs) == REPEATS and result.final_output == "giving up"
        assert client.stats.fail_open == REPEATS and client.stats.start_errors == 1
        assert not any(BLOCK_TEXT in text for text in outputs(result).values())


async def test_two_concurrent_runs_with_colliding_call_ids_stay_apart(tansu, worker):
    """Both runs number their calls call_0, call_1, ...: each must get its own decisions and outputs,
    with tracing off and no trace id (lw.run gives each run an id of its own) and run_end at the end."""
    loop_agent, loop_runs = agent_with_counting_tool(scripted(REPEATS, {"q": "job 42"}))
    varied = ScriptedModel(
        [
            *[[function_call("lookup", {"q": f"job {i}"}, call_id=f"call_{i}")] for i in range(REPEATS)],
            [assistant_message("done")],
        ]
    )
    other_agent, other_runs = agent_with_counting_tool(varied)
    async with client_for(tansu, worker) as client:
        sent: list = []
        publish = client._put

        def spy(event, key):
            sent.append(event)
            return publish(event, key)

        client._put = spy
        lw = guard_agent(loop_agent, client, agent_id="oa-pair")
        lw.attach(other_agent)  # one guard, two agents run at once
        thread = rid("oa-pair")
        config = RunConfig(group_id=thread, tracing_disabled=True)
        looped, plain = await asyncio.gather(
            lw.run(loop_agent, "poll", run_config=config, max_turns=REPEATS + 5),
            lw.run(other_agent, "walk", run_config=config, max_turns=REPEATS + 5),
        )
        out = outputs(looped)
        assert_repeat_outcome([out[f"call_{i}"] for i in range(REPEATS)], len(loop_runs))
        assert len(other_runs) == REPEATS
        assert all("[loopwarden]" not in text and BLOCK_TEXT not in text for text in outputs(plain).values())
        ends = [e for e in sent if type(e).__name__ == "RunEnd"]
        assert len(ends) == 2 and len({e.run_id for e in ends}) == 2 and all(e.session_id == thread for e in ends)


async def test_a_tool_shared_by_two_guarded_agents_is_gated_once(tansu, worker):
    model = scripted(REPEATS, {"q": "job 42"})
    agent, runs = agent_with_counting_tool(model)
    sibling = Agent(name="oa-sibling", tools=list(agent.tools), model=model)
    async with client_for(tansu, worker) as client:
        lw = guard_agent(agent, client)
        guard_agent(sibling, client)  # same tool objects: already gated
        assert [g.name for g in agent.tools[0].tool_input_guardrails] == ["loopwarden"]
        result = await lw.run(agent, "poll", run_config=RunConfig(group_id=rid("oa-shared")), max_turns=REPEATS + 5)
        out = outputs(result)
        assert_repeat_outcome([out[f"call_{i}"] for i in range(REPEATS)], len(runs))
        assert client.stats.checks == REPEATS


async def test_runs_of_one_conversation_never_pool_with_tracing_off(tansu, worker):
    # the README's way: Runner.run with lw.run_config(RunConfig(group_id=...)), tracing off, no trace id:
    # each Runner.run is a run of its own, so three runs of ten identical calls are never warned
    agent, runs = agent_with_counting_tool(scripted(10, {"q": "job 7"}))
    async with client_for(tansu, worker) as client:
        lw = guard_agent(agent, client, timeout=10.0)
        config = RunConfig(group_id=rid("oa-conversation"), tracing_disabled=True)
        for _ in range(3):
            agent.model = scripted(10, {"q": "job 7"})
            result = await Runner.run(agent, "poll", run_config=lw.run_config(config), max_turns=20)
            assert all("WARNING" not in text for text in outputs(result).values())
        assert len(runs) == 30 and client.stats.warned == 0 and client.stats.checks == 30


async def test_profile_parallel_calls_bounded_recovery():
    """openclaw-latest: each model response makes three parallel calls; the run's first critical refuses
    the whole batch before any call runs, the second raises the tripwire (the SDK's way to end a run)."""
    steps = [[function_call(n, a, call_id=i) for n, a, i in parallel_calls(t)] for t in range(1, PARALLEL_TURNS + 1)]
    model = ScriptedModel([*steps, [assistant_message("giving up")]])
    agent, runs = agent_with_counting_tool(model)
    lw = guard_agent(agent, profile_client())
    config, _trace = run_config(rid("oa-thread"))
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as info:
        await lw.run(agent, "poll the job", run_config=config, max_turns=40)
    decision = info.value.output.output_info
    assert decision.action == "abort" and decision.terminal
    assert decision.call.tool_call_id.startswith(f"t{STOP_TURN}")
    assert len(model.calls) == STOP_TURN  # no model call after the stopping batch
    seen = {
        item["call_id"]: str(item["output"])
        for item in model.calls[-1].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    assert_recovery_outcome(seen, len(runs))
