"""Claude Agent SDK + LoopwardenHooks: the SDK's own Claude Code CLI against a scripted local Anthropic API
(tests/hosts/fake_models.py), an in-process SDK MCP tool, real worker on Tansu."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import (  # noqa: E402
    ClaudeAgentOptions,
    HookMatcher,
    ResultMessage,
    create_sdk_mcp_server,
    query,
    tool,
)

from loopwarden.runner.integrations.claude_agent_sdk import LoopwardenHooks  # noqa: E402
from tests.hosts.fake_models import FakeModelServer, anthropic_tool_results, repeat  # noqa: E402
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
    worker_fixture,
)

pytestmark = pytest.mark.integration
worker = worker_fixture("claude-sdk")
TOOL = "mcp__lw__lookup"  # Claude Code's name for the SDK MCP server "lw"'s tool "lookup"
QUIET = (
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
    "DISABLE_AUTOUPDATER",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS",
)


def lookup_tool(behaviour: str = "pending"):
    runs: list = []

    @tool("lookup", "Look something up.", {"q": str})
    async def lookup(args):
        runs.append(args["q"])
        if behaviour == "fail":
            raise RuntimeError("backend down")
        text = progress_output(len(runs)) if behaviour == "progress" else "status: pending"
        return {"content": [{"type": "text", "text": text}]}

    return lookup, runs


def options(root: Path, model_url: str, lookup, hooks: LoopwardenHooks, extra_hooks=None) -> ClaudeAgentOptions:
    for sub in ("config", "home", "project"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    env = {
        "CLAUDE_CONFIG_DIR": str(root / "config"),
        "HOME": str(root / "home"),
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "dummy",
        "MCP_CONNECTION_NONBLOCKING": "false",  # the first request offers the MCP tool
        **dict.fromkeys(QUIET, "1"),
    }
    base = ClaudeAgentOptions(
        mcp_servers={"lw": create_sdk_mcp_server("lw", tools=[lookup])},
        tools=[],  # no built-in tools: the scripted model calls the MCP tool only
        allowed_tools=[TOOL],
        env=env,
        cwd=str(root / "project"),
        max_turns=60,
        setting_sources=[],
        hooks=extra_hooks,
    )
    return hooks.attach(base)


async def run_query(opts: ClaudeAgentOptions) -> ResultMessage | None:
    result = None
    async for message in query(prompt="poll the job", options=opts):
        if isinstance(message, ResultMessage):
            result = message
    return result


def model_view(fm: FakeModelServer) -> dict[str, str]:
    """What the model got for each call id (last request): the result's text, a denial's reason without
    Claude Code's ``PreToolUse:TOOL hook error: `` prefix, and hook context shown after it."""
    bodies = [b for b in fm.fake.bodies("/messages") if b.get("tools")]
    texts: dict[str, str] = {}
    last = None
    for message in bodies[-1]["messages"] if bodies else ():
        content = message.get("content")
        if message.get("role") == "system" and last is not None:
            texts[last] += "\n\n" + str(content)
            continue
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_result":
                body = block.get("content")
                text = body if isinstance(body, str) else "".join(c.get("text", "") for c in body or ())
                if block.get("is_error"):
                    prefix = f"PreToolUse:{TOOL} hook error: "
                    text = text.removeprefix(prefix)
                last = block["tool_use_id"]
                texts[last] = text
    assert len(anthropic_tool_results(bodies[-1])) == len(texts) if bodies else True
    return texts


def ordered(texts: dict[str, str], n: int) -> list[str]:
    return [texts[f"toolu_fake_{i:04d}"] for i in range(n)]


async def test_repeat_loop_is_blocked_at_call_21(tansu, worker, tmp_path):
    lookup, runs = lookup_tool()
    async with client_for(tansu, worker) as client:
        with FakeModelServer() as fm:
            fm.fake.set("anthropic", repeat(TOOL, {"q": "job 42"}), calls=REPEATS)
            lw = LoopwardenHooks(client, timeout=10.0)
            result = await run_query(options(tmp_path, fm.url, lookup, lw))
            texts = model_view(fm)
        assert_repeat_outcome(ordered(texts, REPEATS), len(runs), tool=TOOL)
        assert result is not None and result.result == "All done."  # a block does not end the session
        s = client.stats
        assert (s.checks, s.blocked, s.warned, s.fail_open) == (REPEATS, REPEATS - 20, 1, 0)
        assert s.acks_sent == 1 + (REPEATS - 20)
        assert not lw.gate._runs  # Stop ended the run


async def test_ping_pong_is_warned_at_10_and_blocked_at_20(tansu, worker, tmp_path):
    lookup, runs = lookup_tool()
    async with client_for(tansu, worker) as client:
        with FakeModelServer() as fm:
            fm.fake.set("anthropic", lambda n: (TOOL, pingpong_args(n)), calls=PINGPONG_CALLS)
            await run_query(options(tmp_path, fm.url, lookup, LoopwardenHooks(client)))
            texts = model_view(fm)
        assert_pingpong_outcome(ordered(texts, PINGPONG_CALLS), len(runs))


async def test_a_poll_with_progress_is_never_blocked(tansu, worker, tmp_path):
    lookup, runs = lookup_tool("progress")
    async with client_for(tansu, worker) as client:
        with FakeModelServer() as fm:
            fm.fake.set("anthropic", repeat(TOOL, {"q": "job 42"}), calls=REPEATS)
            result = await run_query(options(tmp_path, fm.url, lookup, LoopwardenHooks(client)))
            texts = model_view(fm)
        assert_progress_outcome(ordered(texts, REPEATS), len(runs))
        assert result.result == "All done." and client.stats.blocked == 0


async def test_compaction_loop_stops_the_session(tansu, worker, tmp_path):
    lookup, runs = lookup_tool()
    async with client_for(tansu, worker) as client:
        lw = LoopwardenHooks(client, timeout=10.0)

        async def compacted(data, tool_use_id, context):  # stands in for a compaction before the prompt
            await lw.compaction_retry(data, "overflow")
            return {}

        extra = {"UserPromptSubmit": [HookMatcher(hooks=[compacted])]}
        with FakeModelServer() as fm:
            fm.fake.set("anthropic", repeat(TOOL, {"q": "huge.log"}), calls=8)
            result = await run_query(options(tmp_path, fm.url, lookup, lw, extra))
            asked = len([b for b in fm.fake.bodies("/messages") if b.get("tools")])
        # decided locally on the third outcome: PostToolUse says continue: false, the model is not asked again
        assert len(runs) == GUARD_WINDOW and asked == GUARD_WINDOW
        aborts = list(lw.gate._ended_aborts.values())
        assert len(aborts) == 1 and aborts[0].detector == "compaction_loop_persisted"
        assert client.stats.acks_sent == 1 and not lw.gate._runs  # the stopped run ended (its abort acked)
        assert result is None or "All done." not in (result.result or "")


async def test_tool_errors_are_published_as_errors(tansu, worker, tmp_path):
    lookup, runs = lookup_tool("fail")
    async with client_for(tansu, worker) as client:
        errors: list = []
        tool_result = client.tool_result

        async def spy(*args, **kwargs):
            event = await tool_result(*args, **kwargs)
            if event.error:
                errors.append(json.loads(bytes(event.error)))
            return event

        client.tool_result = spy
        with FakeModelServer() as fm:
            fm.fake.set("anthropic", repeat(TOOL, {"q": "x"}), calls=2)
            result = await run_query(options(tmp_path, fm.url, lookup, LoopwardenHooks(client, timeout=10.0)))
        assert len(runs) == 2 and result.result == "All done."
        assert len(errors) == 2 and all("backend down" in str(e) for e in errors)


async def test_broker_down_calls_go_ahead(tmp_path):
    lookup, runs = lookup_tool()
    async with closed_port_client() as client:
        with FakeModelServer() as fm:
            fm.fake.set("anthropic", repeat(TOOL, {"q": "x"}), calls=REPEATS)
            result = await run_query(options(tmp_path, fm.url, lookup, LoopwardenHooks(client)))
            texts = model_view(fm)
        assert len(runs) == REPEATS and result.result == "All done."
        assert client.stats.fail_open == REPEATS and client.stats.start_errors == 1
        assert not any(BLOCK_TEXT.replace("lookup", TOOL) in text for text in texts.values())


async def test_two_concurrent_sessions_with_colliding_call_ids(tansu, worker, tmp_path):
    loop_tool, loop_runs = lookup_tool()
    walk_tool, walk_runs = lookup_tool()
    async with client_for(tansu, worker) as client:
        lw = LoopwardenHooks(client)
        with FakeModelServer() as looping, FakeModelServer() as walking:
            looping.fake.set("anthropic", repeat(TOOL, {"q": "job 42"}), calls=REPEATS)
            walking.fake.set("anthropic", lambda n: (TOOL, {"q": f"job {n}"}), calls=REPEATS)
            await asyncio.gather(
                run_query(options(tmp_path / "a", looping.url, loop_tool, lw)),
                run_query(options(tmp_path / "b", walking.url, walk_tool, lw)),
            )
            a, b = model_view(looping), model_view(walking)
        assert_repeat_outcome(ordered(a, REPEATS), len(loop_runs), tool=TOOL)
        assert len(walk_runs) == REPEATS
        assert all("[loopwarden]" not in t and "CRITICAL" not in t for t in b.values())


@pytest.mark.parametrize("changing", [True, False])
async def test_a_79_kb_bash_output_changing_in_its_last_line_is_never_blocked(changing, tansu, worker, tmp_path):
    """Claude Code saves a large Bash output to a file of its own (a new path each call) and shows a
    preview: passed on as the raw object the path made every output unequal, so the same 79 KB every time
    was never a loop. Mapped as the Claude Code hook maps it: changing only in its last line, never
    blocked; identical, blocked from the 21st call."""
    command = "seq 1 14000; date +%s%N" if changing else "seq 1 14000"
    lookup, _runs = lookup_tool()
    async with client_for(tansu, worker) as client:
        with FakeModelServer() as fm:
            fm.fake.set("anthropic", repeat("Bash", {"command": command, "description": "poll"}), calls=REPEATS)
            opts = options(tmp_path, fm.url, lookup, LoopwardenHooks(client, timeout=10.0))
            opts = dataclasses.replace(opts, tools=["Bash"], allowed_tools=["Bash"])
            await run_query(opts)
            bodies = [b for b in fm.fake.bodies("/messages") if b.get("tools")]
        results = anthropic_tool_results(bodies[-1])
        assert len(results) == REPEATS
        blocked = [i for i, block in enumerate(results) if "identical outcomes 20 times" in json.dumps(block)]
        assert blocked == ([] if changing else list(range(20, REPEATS))), blocked
        assert client.stats.blocked == (0 if changing else REPEATS - 20)


async def test_a_response_too_deep_for_json_text_is_passed_on_as_it_is():
    """The host mapping writes objects as JSON text; one nested past the interpreter's recursion limit is
    published as it came (the gate bounds it) instead of raising in the hook."""
    hooks = LoopwardenHooks(object())
    published: list = []

    async def after(ref, call_id, **outcome):
        published.append(outcome)

    hooks.gate.after = after
    hooks.gate.aborted = lambda ref: None
    deep: dict = {}
    for _ in range(100_000):
        deep = {"next": deep}
    data = {"session_id": "s", "tool_use_id": "t", "tool_name": "Other", "tool_response": deep}
    assert await hooks.post_tool_use(data, "t", None) == {}
    assert published == [{"result": deep}]
