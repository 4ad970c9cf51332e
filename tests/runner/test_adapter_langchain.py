"""LangChain v1 ``create_agent`` + LoopwardenMiddleware, GenericFakeChatModel, real worker on Tansu."""

from __future__ import annotations

import asyncio
import uuid

import pytest

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402

from loopwarden.runner.integrations.langchain import LoopwardenMiddleware  # noqa: E402
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
worker = worker_fixture("lc")


class ScriptedChat(GenericFakeChatModel):
    """langchain-core's fake chat model; tools are bound by create_agent, the script ignores them."""

    def bind_tools(self, tools, **kwargs):
        return self


def script(n: int, args: dict) -> ScriptedChat:
    calls = [AIMessage(content="", tool_calls=[{"name": "lookup", "args": args, "id": f"call_{i}"}]) for i in range(n)]
    return ScriptedChat(messages=iter([*calls, AIMessage(content="giving up")]))


def counting_tool():
    runs = []

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        runs.append(q)
        return "status: pending"

    return lookup, runs


def config_for(thread: str) -> tuple[dict, str]:
    run = uuid.uuid4()
    return {"configurable": {"thread_id": thread}, "run_id": run}, str(run)


def tool_texts(messages) -> dict[str, str]:
    return {
        m.tool_call_id: m.content if isinstance(m.content, str) else str(m.content)
        for m in messages
        if isinstance(m, ToolMessage)
    }


async def test_repeat_loop_is_blocked_at_call_21(tansu, worker):
    lookup, runs = counting_tool()
    async with client_for(tansu, worker) as client:
        mw = LoopwardenMiddleware(client, agent_id="lc-agent", timeout=10.0)
        agent = create_agent(script(REPEATS, {"q": "job 42"}), [lookup], middleware=[mw])
        config, _run = config_for(rid("lc-thread"))
        out = await agent.ainvoke({"messages": [("user", "poll the job")]}, config=config)
        texts = tool_texts(out["messages"])
        assert_repeat_outcome([texts[f"call_{i}"] for i in range(REPEATS)], len(runs))
        blocked = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "call_20"][0]
        assert blocked.status == "error" and blocked.name == "lookup"
        assert out["messages"][-1].content == "giving up"  # a block does not end the run
        s = client.stats
        assert (s.checks, s.blocked, s.warned, s.fail_open) == (REPEATS, REPEATS - 20, 1, 0)
        assert s.acks_sent == 1 + (REPEATS - 20)  # the warning delivered, each block obeyed


async def test_compaction_loop_ends_the_run_by_abort(tansu, worker):
    lookup, runs = counting_tool()
    async with client_for(tansu, worker) as client:
        mw = LoopwardenMiddleware(client, agent_id="lc-agent", timeout=10.0)
        model = script(8, {"q": "huge.log"})
        agent = create_agent(model, [lookup], middleware=[mw])
        thread = rid("lc-compact")
        config, run_id = config_for(thread)
        await mw.gate.compaction_retry(RunRef(agent_id="lc-agent", session_id=thread, run_id=run_id), "overflow")
        out = await agent.ainvoke({"messages": [("user", "read the log")]}, config=config)
        assert len(runs) == GUARD_WINDOW  # the same call and outcome 3 times after compaction
        # decided locally on the third outcome: the agent ends before its next model call
        last = out["messages"][-1]
        assert isinstance(last, ToolMessage) and last.tool_call_id == f"call_{GUARD_WINDOW - 1}"
        assert mw.aborted(config) and client.stats.acks_sent == 1  # acked when the run ended
        # 9 scripted answers; the model answered the 3 runs, then was not called again
        assert len(list(model.messages)) == 9 - GUARD_WINDOW


async def test_tool_node_in_a_hand_built_graph(tansu, worker):
    lookup, runs = counting_tool()
    async with client_for(tansu, worker) as client:
        mw = LoopwardenMiddleware(client, agent_id="lc-graph", timeout=10.0)
        model = script(REPEATS, {"q": "job 7"})

        async def call_model(state: MessagesState):
            return {"messages": [await model.ainvoke(state["messages"])]}

        def route(state: MessagesState):
            return "tools" if state["messages"][-1].tool_calls else END

        graph = StateGraph(MessagesState)
        graph.add_node("model", call_model)
        graph.add_node("tools", ToolNode([lookup], awrap_tool_call=mw.awrap_tool_call))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", route)
        graph.add_edge("tools", "model")
        config, _run = config_for(rid("lc-graph"))
        out = await graph.compile().ainvoke({"messages": [("user", "poll")]}, config=config)
        texts = tool_texts(out["messages"])
        assert_repeat_outcome([texts[f"call_{i}"] for i in range(REPEATS)], len(runs))


async def test_broker_down_calls_go_ahead(tmp_path):
    lookup, runs = counting_tool()
    async with closed_port_client() as client:
        mw = LoopwardenMiddleware(client, agent_id="lc-open")
        agent = create_agent(script(REPEATS, {"q": "x"}), [lookup], middleware=[mw])
        config, _run = config_for(rid("lc-open"))
        out = await agent.ainvoke({"messages": [("user", "go")]}, config=config)
        assert len(runs) == REPEATS and out["messages"][-1].content == "giving up"
        assert client.stats.fail_open == REPEATS and client.stats.start_errors == 1
        assert not any(BLOCK_TEXT in str(m.content) for m in out["messages"])


async def test_invocations_without_ids_are_runs_of_their_own(tansu, worker):
    """No thread_id, no run_id: each ainvoke gets a run id of its own (25 repeats each: the second is
    not blocked from its first call, as it was when every invocation pooled into one run)."""
    async with client_for(tansu, worker) as client:
        mw = LoopwardenMiddleware(client, agent_id=rid("lc-noids"))
        for _ in range(2):
            lookup, runs = counting_tool()
            agent = create_agent(script(REPEATS, {"q": "job 42"}), [lookup], middleware=[mw])
            out = await agent.ainvoke({"messages": [("user", "poll")]})
            texts = tool_texts(out["messages"])
            assert_repeat_outcome([texts[f"call_{i}"] for i in range(REPEATS)], len(runs))


async def test_two_concurrent_invocations_with_colliding_call_ids(tansu, worker):
    async with client_for(tansu, worker) as client:
        mw = LoopwardenMiddleware(client, agent_id="lc-pair")
        loop_tool, loop_runs = counting_tool()
        other_tool, other_runs = counting_tool()
        varied = [
            AIMessage(content="", tool_calls=[{"name": "lookup", "args": {"q": f"job {i}"}, "id": f"call_{i}"}])
            for i in range(REPEATS)
        ]
        looping = create_agent(script(REPEATS, {"q": "job 42"}), [loop_tool], middleware=[mw])
        walking = create_agent(
            ScriptedChat(messages=iter([*varied, AIMessage(content="done")])), [other_tool], middleware=[mw]
        )
        thread = rid("lc-pair")
        a, b = await asyncio.gather(
            looping.ainvoke({"messages": [("user", "poll")]}, config=config_for(thread)[0]),
            walking.ainvoke({"messages": [("user", "walk")]}, config=config_for(thread)[0]),
        )
        texts = tool_texts(a["messages"])
        assert_repeat_outcome([texts[f"call_{i}"] for i in range(REPEATS)], len(loop_runs))
        assert len(other_runs) == REPEATS
        assert all("[loopwarden]" not in t and BLOCK_TEXT not in t for t in tool_texts(b["messages"]).values())


async def test_a_hand_built_graph_sees_the_abort_in_its_model_node(tansu, worker):
    lookup, runs = counting_tool()
    async with client_for(tansu, worker) as client:
        mw = LoopwardenMiddleware(client, agent_id="lc-graph-abort")
        model = script(8, {"q": "huge.log"})
        seen: list[bool] = []

        async def call_model(state: MessagesState):
            aborted = mw.aborted()  # the node's own run, from its runtime
            seen.append(aborted)
            if aborted:
                return {"messages": [AIMessage(content="stopped")]}
            return {"messages": [await model.ainvoke(state["messages"])]}

        def route(state: MessagesState):
            return "tools" if state["messages"][-1].tool_calls else END

        graph = StateGraph(MessagesState)
        graph.add_node("model", call_model)
        graph.add_node("tools", ToolNode([lookup], awrap_tool_call=mw.awrap_tool_call))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", route)
        graph.add_edge("tools", "model")
        config, _run = config_for(rid("lc-graph-abort"))
        await mw.compaction_retry(config, "overflow")  # outside the graph: the config names the run
        out = await graph.compile().ainvoke({"messages": [("user", "read the log")]}, config=config)
        assert len(runs) == GUARD_WINDOW and seen[-1] is True and seen.count(True) == 1
        assert out["messages"][-1].content == "stopped"


async def test_profile_parallel_calls_bounded_recovery():
    """openclaw-latest: one model message with three parallel calls per turn; the run's first critical
    refuses the whole batch before any call runs, the second ends the agent (before_model jumps to end)."""
    runs = []

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        runs.append(q)
        return "status: pending"

    turns = [
        AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in parallel_calls(t)])
        for t in range(1, PARALLEL_TURNS + 1)
    ]
    mw = LoopwardenMiddleware(profile_client(), agent_id="lc-agent")
    thread = rid("lc-thread")
    for _prompt in range(2):  # a new prompt is a new run: the allowance (and the history) start again
        runs.clear()
        model = ScriptedChat(messages=iter([*turns, AIMessage(content="giving up")]))
        agent = create_agent(model, [lookup], middleware=[mw])
        config, _run = config_for(thread)
        out = await agent.ainvoke({"messages": [("user", "poll the job")]}, config=config)
        assert_recovery_outcome(tool_texts(out["messages"]), len(runs))
        assert f"t{STOP_TURN}a" in tool_texts(out["messages"])  # the stopping batch is answered, then the end
        assert not any(isinstance(m, AIMessage) and m.content == "giving up" for m in out["messages"])
        assert mw.aborted(config)
