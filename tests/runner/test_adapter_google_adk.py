"""Google ADK + LoopwardenPlugin, a scripted ADK model (a ``BaseLlm``), real worker on Tansu."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

pytest.importorskip("google.adk.plugins.base_plugin")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.apps import App  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.plugins.base_plugin import BasePlugin  # noqa: E402
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.genai import types  # noqa: E402

from loopwarden.runner.integrations.google_adk import LoopwardenPlugin  # noqa: E402
from loopwarden.runner.wire import RunRef  # noqa: E402
from tests.runner.adapter_cases import (
    BLOCK_TEXT,
    GUARD_WINDOW,
    PARALLEL_TURNS,
    PINGPONG_CALLS,
    REPEATS,
    STOP_TURN,
    assert_pingpong_outcome,
    assert_progress_outcome,
    assert_recovery_outcome,
    assert_repeat_outcome,
    client_for,
    closed_port_client,
    parallel_calls,
    pingpong_args,
    profile_client,
    progress_output,
    rid,
    spy_results,
    tool_errors,
    worker_fixture,
)

pytestmark = pytest.mark.integration
worker = worker_fixture("adk")
APP = "lw-adk"
LAST_INVOCATION = [""]  # the invocation id of the last run_agent (ADK makes one per run_async)


class Scripted(BaseLlm):
    """Answers each request with the next turn's function calls (name, args, id), then with text."""

    model: str = "scripted"
    turns: list = []
    requests: list = []

    async def generate_content_async(self, llm_request: Any, stream: bool = False):
        self.requests.append(llm_request)
        i = len(self.requests) - 1
        if i < len(self.turns):
            parts = [types.Part(function_call=types.FunctionCall(name=n, args=a, id=c)) for n, a, c in self.turns[i]]
        else:
            parts = [types.Part(text="giving up")]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


def repeating(n: int, args_of) -> Scripted:
    return Scripted(turns=[[("lookup", args_of(i), f"call_{i}")] for i in range(n)], requests=[])


def agent_for(model: Scripted, *, fail: bool = False, progress: bool = False) -> tuple[LlmAgent, list]:
    runs: list = []

    async def lookup(q: str) -> str:
        """Look something up."""
        runs.append(q)
        await asyncio.sleep(0.005)  # a tool that awaits: concurrent runs interleave here
        if fail:
            raise RuntimeError("backend down")
        return progress_output(len(runs)) if progress else "status: pending"

    return LlmAgent(name="adk_agent", model=model, tools=[lookup]), runs


async def run_agent(agent: LlmAgent, *plugins, session_id: str | None = None) -> tuple[dict[str, str], str]:
    """Run one invocation; returns call id -> the function response the model got, and the final text."""
    runner = InMemoryRunner(app=App(name=APP, root_agent=agent, plugins=list(plugins)))
    session = await runner.session_service.create_session(app_name=APP, user_id="u", session_id=session_id)
    texts: dict[str, str] = {}
    final = ""
    message = types.Content(role="user", parts=[types.Part(text="poll the job")])
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        LAST_INVOCATION[0] = event.invocation_id
        for part in event.content.parts if event.content else ():
            if part.function_response is not None:
                response = part.function_response.response or {}
                texts[part.function_response.id] = (
                    response["result"] if isinstance(response.get("result"), str) else str(response)
                )
            elif part.text:
                final = part.text
    return texts, final


async def test_repeat_loop_is_blocked_at_call_21(tansu, worker):
    model = repeating(REPEATS, lambda i: {"q": "job 42"})
    agent, runs = agent_for(model)
    async with client_for(tansu, worker) as client:
        texts, final = await run_agent(agent, LoopwardenPlugin(client, timeout=10.0), session_id=rid("adk"))
        assert_repeat_outcome([texts[f"call_{i}"] for i in range(REPEATS)], len(runs))
        assert final == "giving up"  # a block does not end the invocation
        s = client.stats
        assert (s.checks, s.blocked, s.warned, s.fail_open) == (REPEATS, REPEATS - 20, 1, 0)
        assert s.acks_sent == 1 + (REPEATS - 20)


async def test_ping_pong_is_warned_at_10_and_blocked_at_20(tansu, worker):
    agent, runs = agent_for(repeating(PINGPONG_CALLS, pingpong_args))
    async with client_for(tansu, worker) as client:
        texts, _ = await run_agent(agent, LoopwardenPlugin(client), session_id=rid("adk-pp"))
        assert_pingpong_outcome([texts[f"call_{i}"] for i in range(PINGPONG_CALLS)], len(runs))


async def test_a_poll_with_progress_is_never_blocked(tansu, worker):
    agent, runs = agent_for(repeating(REPEATS, lambda i: {"q": "job 42"}), progress=True)
    async with client_for(tansu, worker) as client:
        texts, final = await run_agent(agent, LoopwardenPlugin(client), session_id=rid("adk-progress"))
        assert_progress_outcome([texts[f"call_{i}"] for i in range(REPEATS)], len(runs))
        assert final == "giving up" and client.stats.blocked == 0


class Compacted(BasePlugin):
    """Stands in for a history compaction before the first model request: tells loopwarden."""

    def __init__(self, lw: LoopwardenPlugin) -> None:
        super().__init__(name="compacted")
        self.lw = lw
        self.done = False

    async def before_model_callback(self, *, callback_context, llm_request):
        if not self.done:
            self.done = True
            await self.lw.compaction_retry(callback_context, "overflow")


async def test_compaction_loop_ends_the_invocation_by_abort(tansu, worker):
    model = repeating(8, lambda i: {"q": "huge.log"})
    agent, runs = agent_for(model)
    async with client_for(tansu, worker) as client:
        lw = LoopwardenPlugin(client, timeout=10.0)
        session = rid("adk-compact")
        texts, final = await run_agent(agent, lw, Compacted(lw), session_id=session)
        # decided locally on the third outcome: the invocation ends right after it, the model not asked again
        assert len(runs) == GUARD_WINDOW and len(model.requests) == GUARD_WINDOW
        assert final.startswith("[loopwarden] run stopped: CRITICAL")
        assert len(texts) == GUARD_WINDOW
        abort = lw.gate.aborted(RunRef(agent_id="adk_agent", session_id=session, run_id=LAST_INVOCATION[0]))
        assert abort.detector == "compaction_loop_persisted" and client.stats.acks_sent == 1


async def test_tool_errors_are_published_as_errors(tansu, worker):
    agent, runs = agent_for(repeating(2, lambda i: {"q": "x"}), fail=True)
    async with client_for(tansu, worker) as client:
        sent = spy_results(client)
        with pytest.raises(RuntimeError, match="backend down"):  # ADK's own handling: the invocation fails
            await run_agent(agent, lw := LoopwardenPlugin(client, timeout=10.0), session_id=rid("adk-error"))
        assert len(runs) == 1
        assert tool_errors(sent) == [b'"RuntimeError: backend down"']
        assert not lw.gate._runs  # the failed invocation still ended its run (after_run_callback)


async def test_broker_down_calls_go_ahead():
    agent, runs = agent_for(repeating(REPEATS, lambda i: {"q": "x"}))
    async with closed_port_client() as client:
        texts, final = await run_agent(agent, LoopwardenPlugin(client))
        assert len(runs) == REPEATS and final == "giving up"
        assert client.stats.fail_open == REPEATS and client.stats.start_errors == 1
        assert not any(BLOCK_TEXT in text for text in texts.values())


async def test_two_concurrent_invocations_with_colliding_call_ids(tansu, worker):
    loop_agent, loop_runs = agent_for(repeating(REPEATS, lambda i: {"q": "job 42"}))
    walk_agent, walk_runs = agent_for(repeating(REPEATS, lambda i: {"q": f"job {i}"}))
    async with client_for(tansu, worker) as client:
        lw = LoopwardenPlugin(client)
        (a, _), (b, _) = await asyncio.gather(run_agent(loop_agent, lw), run_agent(walk_agent, lw))
        assert_repeat_outcome([a[f"call_{i}"] for i in range(REPEATS)], len(loop_runs))
        assert len(walk_runs) == REPEATS
        assert all("[loopwarden]" not in t and BLOCK_TEXT not in t for t in b.values())


async def test_profile_parallel_calls_bounded_recovery():
    """openclaw-latest: each model response makes three parallel calls; the run's first critical refuses
    the whole batch before any call runs, the second ends the invocation."""
    model = Scripted(turns=[parallel_calls(turn) for turn in range(1, PARALLEL_TURNS + 1)], requests=[])
    agent, runs = agent_for(model)
    texts, final = await run_agent(agent, LoopwardenPlugin(profile_client()), session_id=rid("adk-profile"))
    assert len(model.requests) == STOP_TURN and final.startswith(
        "[loopwarden] run stopped"
    )  # no model request after the stopping batch
    assert_recovery_outcome(texts, len(runs))


def test_calls_without_ids_get_one_before_admission():
    """A model that sends no call ids (Gemini often does not): the plugin gives each ADK's kind of id, so the
    batch's decisions are found again by the calls."""
    plugin = LoopwardenPlugin(profile_client())
    call = types.FunctionCall(name="lookup", args={"q": "x"})
    response = LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))

    class Ctx:
        invocation_id = f"e-{uuid.uuid4().hex}"
        agent_name = "a"

        class session:  # noqa: N801 - the shape of ADK's context
            id = "s"

    asyncio.run(plugin.after_model_callback(callback_context=Ctx(), llm_response=response))
    assert call.id and call.id.startswith("adk-")
