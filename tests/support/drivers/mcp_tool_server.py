"""An MCP server for the proxy's tests, on the SDK's low-level Server, over stdio.

Tools: ``echo`` (returns its text), ``poll`` (always "pending"), ``fail`` (a
tool-execution error), ``boom`` (a protocol error), ``count`` (how many calls
of the other tools this process ran, so a test sees which calls reached it).
``jobs`` and ``jobs_closed`` return ``structuredContent`` with its text in ``content`` (an output
schema open to more keys, and one that forbids them). One resource and one prompt, to see them passed
through. ``--http PORT`` serves streamable HTTP on 127.0.0.1 instead of stdio.
"""

from __future__ import annotations

import sys

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

ran = {"n": 0}
TOOLS = [
    types.Tool(
        name="echo",
        description="Echo the text back.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    ),
    types.Tool(
        name="poll",
        description="Poll a job.",
        input_schema={"type": "object", "properties": {"job": {"type": "string"}}},
    ),
    types.Tool(name="fail", description="Always a tool error.", input_schema={"type": "object"}),
    types.Tool(name="boom", description="Always a protocol error.", input_schema={"type": "object"}),
    types.Tool(name="count", description="Calls this server ran.", input_schema={"type": "object"}),
    types.Tool(
        name="jobs",
        description="Jobs queued (structured).",
        input_schema={"type": "object"},
        output_schema={"type": "object", "properties": {"jobs": {"type": "integer"}}},
    ),
    types.Tool(
        name="jobs_closed",
        description="Jobs queued (structured, no other keys).",
        input_schema={"type": "object"},
        output_schema={"type": "object", "properties": {"jobs": {"type": "integer"}}, "additionalProperties": False},
    ),
]


def text(value: str) -> list[types.TextContent]:
    return [types.TextContent(type="text", text=value)]


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    if params.name == "count":
        return types.CallToolResult(content=text(str(ran["n"])))
    ran["n"] += 1
    if params.name == "echo":
        return types.CallToolResult(content=text(str(args.get("text", ""))))
    if params.name == "poll":
        return types.CallToolResult(content=text("pending"))
    if params.name in ("jobs", "jobs_closed"):
        return types.CallToolResult(content=text('{"jobs": 3}'), structured_content={"jobs": 3})
    if params.name == "fail":
        return types.CallToolResult(content=text("disk on fire"), is_error=True)
    raise MCPError(code=-32603, message="boom")


async def list_resources(ctx, params) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=[types.Resource(uri="mem://note", name="note", mime_type="text/plain")])


async def read_resource(ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=params.uri, text="a note", mime_type="text/plain")]
    )


async def list_prompts(ctx, params) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=[types.Prompt(name="greet", description="Say hello.")])


async def get_prompt(ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    message = types.PromptMessage(role="user", content=types.TextContent(type="text", text="hello"))
    return types.GetPromptResult(messages=[message])


server = Server(
    "tool-server",
    version="1.0",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_read_resource=read_resource,
    on_list_prompts=list_prompts,
    on_get_prompt=get_prompt,
)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main_http(port: int) -> None:
    import uvicorn

    uvicorn.run(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        main_http(int(sys.argv[2]))
    else:
        anyio.run(main)
