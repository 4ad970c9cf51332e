"""The MCP server ``loopwarden bench mcp`` calls: one ``echo`` tool on the SDK's low-level Server, over stdio.

Run as ``python -m loopwarden.bench.mcp_server`` (``--http PORT``: streamable HTTP on 127.0.0.1);
its answer costs next to nothing, so what a
call through the proxy adds is the proxy's own time.
"""

from __future__ import annotations

import sys

import anyio


def main() -> None:
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    tool = types.Tool(name="echo", description="Echo the text.", input_schema={"type": "object"})

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = str((params.arguments or {}).get("text", ""))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server = Server("bench-echo", on_list_tools=list_tools, on_call_tool=call_tool)

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    if sys.argv[1:2] == ["--http"]:
        import uvicorn

        app = server.streamable_http_app(host="127.0.0.1")
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        anyio.run(serve)


if __name__ == "__main__":
    main()
