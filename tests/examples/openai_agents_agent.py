"""An OpenAI Agents SDK agent stuck polling, stopped by loopwarden's tool guardrails.

    pip install -e '.[openai-agents]' && python tests/examples/openai_agents_agent.py

The SDK's ScriptedModel asks for the same ``check_job`` 25 times: the tool
runs 20 times, call 11's output carries the warning, call 21 onwards get
the block message (``reject_content``) instead of running.
"""

from __future__ import annotations

from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

try:
    from _harness import run, show
except ImportError:
    from tests.examples._harness import run, show


@function_tool
def check_job(job: str) -> str:
    """Status of a build job."""
    return f"{job}: status pending"


async def agent(client) -> None:
    from loopwarden.runner.integrations.openai_agents import guard_agent

    model = ScriptedModel(
        [
            *([function_call("check_job", {"job": "42"}, call_id=f"call_{i}")] for i in range(25)),
            [assistant_message("The job is stuck; giving up.")],
        ]
    )
    bot = Agent(name="oa-demo", tools=[check_job], model=model)
    lw = guard_agent(bot, client)  # every function tool of the agent is gated
    result = await Runner.run(
        bot,
        "Wait for job 42",
        max_turns=40,
        run_config=lw.run_config(
            RunConfig(group_id="demo-thread", tracing_disabled=True, trace_id="trace_" + "0" * 31 + "1")
        ),
    )
    for i, item in enumerate(x for x in result.new_items if isinstance(x, ToolCallOutputItem)):
        show(i, str(item.output))
    print("model:", result.final_output)


if __name__ == "__main__":
    run(agent, "oademo")
