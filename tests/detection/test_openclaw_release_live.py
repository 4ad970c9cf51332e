"""A live OpenClaw turn (openclaw@2026.9.6, ``openclaw agent --local``, scripted provider) and a loopwarden
runner under the openclaw-latest profile, given the same tool calls: warned, blocked and stopped at the
same calls, with the same model-facing text.

The scripted model sends three parallel calls per assistant message: the same ``read`` twice (siblings
admitted earlier count as vetoes for later ones) and a fresh one. The release warns on turn 6, refuses the
whole batch on turn 11 (bounded recovery) and stops the run on turn 12 (a second critical).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.hosts.openclaw_host import run_turn, text_of, tool_results

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROFILE_CONFIG = {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"profile": "openclaw-latest"}}
TURNS = 20


def script(messages: list[dict]):
    done = len(tool_results(messages))
    if done >= 3 * TURNS:
        return "done"
    turn = done // 3
    return [("read", {"path": "a.md"}), ("read", {"path": "a.md"}), ("read", {"path": f"n{turn}.md"})]


def batches_seen(messages: list[dict]) -> list[list[dict]]:
    """The assistant batches of a request, each call with the text the model got for it."""
    texts = {m.get("tool_call_id"): text_of(m) for m in messages if m.get("role") == "tool"}
    out = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            out.append(
                [
                    {
                        "id": c["id"],
                        "name": c["function"]["name"],
                        "args": c["function"]["arguments"],
                        "text": texts[c["id"]],
                    }
                    for c in m["tool_calls"]
                ]
            )
    return out


async def _runner(batches: list[list[dict]]):
    from loopwarden.runner import LoopClient

    client = LoopClient(config=PROFILE_CONFIG, decisions="local")
    run = client.run("main", session_id="s-1", run_id="live")
    out = []
    for batch in batches:
        decisions = await client.check_batch([run.call(c["name"], json.loads(c["args"]), c["id"]) for c in batch])
        for call, d in zip(batch, decisions, strict=True):
            if d.proceed:
                raw = call["text"].split("\n[System note:")[0]  # the tool's own output, as the release hashed it
                await client.tool_result(d, result={"content": [{"type": "text", "text": raw}]})
            else:
                await client.tool_result(d, result=d.blocked_result())
        out.append(decisions)
    return out


def test_live_turn_and_runner_warn_block_and_stop_at_the_same_calls(tmp_path):
    workspace = tmp_path / "home" / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "a.md").write_text("notes\n")
    turn = run_turn(tmp_path, script, message="check the notes", timeout=400)
    last = turn.requests[-1]["messages"]
    seen = batches_seen(last)
    # the batch the model sent in answer to the last request: the release stopped the run on it
    stopping = [{"id": f"stop-{i}", "name": n, "args": json.dumps(a)} for i, (n, a) in enumerate(script(last))]
    assert len(seen) == 11 and len(turn.requests) == 12  # no model call after the stopping batch
    assert "tool-loop recovery encountered another critical loop" in turn.stdout + turn.stderr

    decisions = asyncio.run(_runner(seen + [[dict(c, text="") for c in stopping]]))
    for batch, answers in zip(seen, decisions, strict=False):
        for call, d in zip(batch, answers, strict=True):
            text = call["text"]
            if "[System note: Tool-loop warning" in text:
                assert d.action == "warn" and text.endswith("\n" + d.note)
            elif d.action == "warn":
                pytest.fail(f"runner warned at {call['id']}, the release did not")
            if d.proceed:
                assert "CRITICAL" not in text and "not executed" not in text
            else:
                assert d.action == "block" and not d.terminal
                assert d.blocked_result()["content"][0]["text"] == text  # the release's words, built from fields
    warned = [c["id"] for b in seen for c in b if "System note" in c["text"]]
    assert warned == [seen[5][0]["id"]]
    refused = [d.recovery for d in decisions[10]]
    assert refused == ["trigger", "sibling", "sibling"]
    assert all(d.proceed for b in decisions[:10] for d in b)
    final = decisions[11]
    assert [d.action for d in final] == ["abort"] * 3 and final[0].terminal and final[0].recovery == "trigger"
