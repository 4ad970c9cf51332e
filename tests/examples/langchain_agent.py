"""A LangChain v1 agent stuck polling, stopped by loopwarden's middleware.

    pip install -e '.[langchain]' && python tests/examples/langchain_agent.py

The scripted model (langchain-core's fake chat model) asks for the same
``check_job`` 25 times: the tool runs 20 times, call 11's result carries
the warning, call 21 onwards get the block message instead of running.
"""

from __future__ import annotations

import uuid

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

try:
    from _harness import run, show
except ImportError:  # imported as tests.examples.langchain_agent
    from tests.examples._harness import run, show


class ScriptedChat(GenericFakeChatModel):
    def bind_tools(self, tools, **kwargs):
        return self


@tool
def check_job(job: str) -> str:
    """Status of a build job."""
    return f"{job}: status pending"


async def agent(client) -> None:
    from loopwarden.runner.integrations.langchain import LoopwardenMiddleware

    calls = [
        AIMessage(content="", tool_calls=[{"name": "check_job", "args": {"job": "42"}, "id": f"call_{i}"}])
        for i in range(25)
    ]
    model = ScriptedChat(messages=iter([*calls, AIMessage(content="The job is stuck; giving up.")]))
    app = create_agent(model, [check_job], middleware=[LoopwardenMiddleware(client, agent_id="lc-demo")])
    out = await app.ainvoke(
        {"messages": [("user", "Wait for job 42")]},
        config={"configurable": {"thread_id": "demo-thread"}, "run_id": uuid.uuid4()},
    )
    for i, m in enumerate(m for m in out["messages"] if isinstance(m, ToolMessage)):
        show(i, str(m.content))
    print("model:", out["messages"][-1].content)


if __name__ == "__main__":
    run(agent, "lcdemo")
