"""A PydanticAI agent stuck polling, stopped by loopwarden's capability.

    pip install -e '.[pydantic-ai]' && python tests/examples/pydantic_ai_agent.py

pydantic-ai's FunctionModel asks for the same ``check_job`` 25 times: the
tool runs 20 times, call 11's result carries the warning, call 21 onwards
get the block message instead of running.
"""

from __future__ import annotations

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

try:
    from _harness import run, show
except ImportError:
    from tests.examples._harness import run, show


def stuck_model(messages, info) -> ModelResponse:
    turn = len([m for m in messages if m.kind == "response"])
    if turn < 25:
        return ModelResponse(parts=[ToolCallPart("check_job", {"job": "42"}, tool_call_id=f"call_{turn}")])
    return ModelResponse(parts=[TextPart("The job is stuck; giving up.")])


async def agent(client) -> None:
    from loopwarden.runner.integrations.pydantic_ai import LoopwardenCapability

    bot = Agent(FunctionModel(stuck_model), name="pa-demo", capabilities=[LoopwardenCapability(client)])

    @bot.tool_plain
    def check_job(job: str) -> str:
        """Status of a build job."""
        return f"{job}: status pending"

    result = await bot.run("Wait for job 42", conversation_id="demo-thread")
    parts = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    for i, part in enumerate(parts):
        show(i, part.model_response_str())
    print("model:", result.output)


if __name__ == "__main__":
    run(agent, "pademo")
