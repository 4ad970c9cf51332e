"""Framework adapters for the runner client (each an optional extra).

- :mod:`loopwarden.runner.integrations.langchain`: LangChain v1 ``create_agent``
  middleware, and the same gate for LangGraph's ``ToolNode`` (``loopwarden[langchain]``);
- :mod:`loopwarden.runner.integrations.openai_agents`: OpenAI Agents SDK tool
  guardrails (``loopwarden[openai-agents]``);
- :mod:`loopwarden.runner.integrations.pydantic_ai`: a PydanticAI capability
  (``loopwarden[pydantic-ai]``);
- :mod:`loopwarden.runner.integrations.google_adk`: a Google ADK runner plugin
  (``loopwarden[google-adk]``);
- :mod:`loopwarden.runner.integrations.strands`: Strands Agents hooks
  (``loopwarden[strands]``);
- :mod:`loopwarden.runner.integrations.claude_agent_sdk`: Claude Agent SDK
  hooks (``loopwarden[claude-agent-sdk]``);
- :mod:`loopwarden.runner.integrations.crewai`: CrewAI tool and model hooks
  (``loopwarden[crewai]``);
- :mod:`loopwarden.runner.integrations.llama_index`: gated tools for
  LlamaIndex workflow agents (``loopwarden[llama-index]``).

Nothing is imported here, so a missing framework only matters to its own adapter.
"""
