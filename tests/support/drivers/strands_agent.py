"""A Strands agent with LoopwardenHooks and a scripted Strands model (a ``Model``); run in the strands venv.

Reads a scenario on stdin (drivers/framework_harness.py); prints the outcome.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from strands import Agent, tool
from strands.agent.conversation_manager import NullConversationManager
from strands.hooks import BeforeModelCallEvent, HookProvider, HookRegistry
from strands.models.model import Model

sys.path.insert(0, str(Path(__file__).resolve().parent))

from framework_harness import drive, make_tool_body  # noqa: E402

from loopwarden.runner.integrations.strands import LoopwardenHooks  # noqa: E402


class Scripted(Model):
    """Streams each request's answer: the next turn's tool uses, then a text."""

    def __init__(self, turns: list) -> None:
        self.turns = turns
        self.requests = 0

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    async def structured_output(self, output_model: Any, prompt: Any, system_prompt: Any = None, **kwargs: Any):
        raise NotImplementedError
        yield  # pragma: no cover

    async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any):
        turn = self.turns[self.requests] if self.requests < len(self.turns) else None
        self.requests += 1
        yield {"messageStart": {"role": "assistant"}}
        if turn is None:
            yield {"contentBlockDelta": {"delta": {"text": "giving up"}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            return
        for name, args, call_id in turn:
            yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": call_id, "name": name}}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args)}}}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}


class Compacted(HookProvider):
    """Stands in for a history compaction before the first model request: tells loopwarden."""

    def __init__(self, lw: LoopwardenHooks) -> None:
        self.lw = lw
        self.done = False

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeModelCallEvent, self.compacted)

    async def compacted(self, event: BeforeModelCallEvent) -> None:
        if not self.done:
            self.done = True
            await self.lw.compaction_retry(event, "overflow")


async def run_one(client: Any, lw: LoopwardenHooks, spec: dict) -> dict:
    runs: list = []
    body = make_tool_body(spec["tool"], runs)

    @tool
    async def lookup(q: str) -> str:
        """Look something up."""
        return await body(q)

    model = Scripted(spec["turns"])
    hooks: list = [lw, Compacted(lw)] if spec["compaction"] else [lw]
    agent = Agent(
        model=model,
        tools=[lookup],
        hooks=hooks,
        name="strands_agent",
        callback_handler=None,
        conversation_manager=NullConversationManager(),  # every call's result stays readable
    )
    result = await agent.invoke_async("poll the job")
    texts = {
        block["toolResult"]["toolUseId"]: "\n".join(c.get("text", "") for c in block["toolResult"]["content"])
        for message in agent.messages
        for block in message["content"]
        if "toolResult" in block
    }
    final = "".join(block.get("text", "") for block in (result.message or {}).get("content", ()))
    ended = list(lw.gate._ended_aborts.values())
    return {
        "texts": texts,
        "tool_runs": len(runs),
        "requests": model.requests,
        "final": final,
        "stop_reason": str(result.stop_reason),
        "abort": ended[-1].detector if ended else None,
    }


if __name__ == "__main__":
    asyncio.run(drive(run_one, lambda client: LoopwardenHooks(client, timeout=10.0)))
