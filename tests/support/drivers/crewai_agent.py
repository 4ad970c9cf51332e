"""A CrewAI crew with LoopwardenCrewHooks and a scripted CrewAI model (a ``BaseLLM`` making native tool
calls); run in the crewai venv. Reads a scenario on stdin (drivers/framework_harness.py); prints the outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

from crewai import Agent, Crew, Task  # noqa: E402
from crewai.llms.base_llm import BaseLLM  # noqa: E402
from crewai.tools import tool  # noqa: E402
from crewai.utilities import agent_utils  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from framework_harness import drive, progress_output  # noqa: E402

from loopwarden.runner.integrations.crewai import LoopwardenCrewHooks  # noqa: E402
from loopwarden.runner.wire import RunRef  # noqa: E402

# CrewAI stops a run itself on the 5th identical call with an identical result (ToolExecutionFailedError), a
# module constant with no setting; the rows test loopwarden's rules past it (LW_CREWAI_OWN_STOPPER=1 keeps it:
# test_crewai_own_stopper_ends_a_loop_at_5).
if os.environ.get("LW_CREWAI_OWN_STOPPER") != "1":
    agent_utils.MAX_REPEATED_TOOL_CALLS = 10**6


class Scripted(BaseLLM):
    """Answers each request with the next turn's tool calls (OpenAI's shape), then with text."""

    def __init__(self, turns: list) -> None:
        super().__init__(model="scripted")
        self._turns = turns
        self.requests: list = []

    def supports_function_calling(self) -> bool:
        return True

    def call(self, messages: Any, tools: Any = None, *args: Any, **kwargs: Any) -> Any:
        self.requests.append(list(messages) if isinstance(messages, list) else messages)
        i = len(self.requests) - 1
        if i < len(self._turns):
            return [
                {"id": c, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for n, a, c in self._turns[i]
            ]
        return "giving up"


async def run_one(client: Any, lw: LoopwardenCrewHooks, spec: dict) -> dict:
    runs: list = []
    lock = threading.Lock()

    @tool("lookup")
    def lookup(q: str) -> str:
        """Look something up."""
        with lock:
            runs.append(q)
            n = len(runs)
        if spec["tool"] == "fail":
            raise RuntimeError("backend down")
        return progress_output(n) if spec["tool"] == "progress" else "status: pending"

    llm = Scripted(spec["turns"])
    agent = Agent(role="crew_agent", goal="poll", backstory="polls jobs", llm=llm, tools=[lookup], max_iter=100)
    task = Task(description="poll the job", expected_output="its status", agent=agent)
    crew = Crew(agents=[agent], tasks=[task])
    run_id = f"run_{uuid.uuid4().hex}"
    if spec["compaction"]:
        await lw.compaction_retry(RunRef(agent_id="crew_agent", session_id=str(crew.id), run_id=run_id), "overflow")
    final, error = "", None
    try:
        final = (await lw.kickoff(crew, run_id=run_id)).raw
    except Exception as exc:  # noqa: BLE001 - reported to the test
        error = type(exc).__name__
    last = llm.requests[-1] if llm.requests else []
    texts = {m["tool_call_id"]: m["content"] for m in last if isinstance(m, dict) and m.get("role") == "tool"}
    ended = lw.gate.aborted(RunRef(agent_id="crew_agent", session_id=str(crew.id), run_id=run_id))
    return {
        "texts": texts,
        "tool_runs": len(runs),
        "requests": len(llm.requests),
        "final": final,
        "error": error,
        "abort": ended.detector if ended is not None else None,
    }


if __name__ == "__main__":
    asyncio.run(drive(run_one, lambda client: LoopwardenCrewHooks(client, timeout=10.0)))
