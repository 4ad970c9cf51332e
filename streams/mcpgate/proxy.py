"""The MCP proxy: the wrapped server's capabilities served again, with every ``tools/call`` gated.

Built on the official SDK: the wrapped server is reached with its high-level
client (``mcp.Client``, which probes ``server/discover`` and falls back to the
``initialize`` handshake, so modern and older servers both work) and the
proxy serves with its low-level ``Server`` (which speaks both eras to the
host). What passes (streams/mcpgate/MCP.md has the table):

- ``tools/list`` unchanged (names, schemas, annotations, pages);
- ``tools/call`` through :class:`~loopwarden.mcpgate.gate.ToolGate`;
- ``resources/list``, ``resources/templates/list``, ``resources/read``,
  ``prompts/list``, ``prompts/get``, ``completion/complete``: forwarded as
  they are, each only when the server offers it.

Who a call belongs to: the agent is ``--agent-id`` or the host's own name
(``clientInfo.name``); the run is the MCP session (``Mcp-Session-Id`` on
streamable HTTP) or, where the transport has none (stdio, stateless HTTP),
the proxy's connection: one run per proxy process.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import mcp.types as types
from mcp import Client, StdioServerParameters
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from loopwarden.mcpgate.gate import ToolGate

log = logging.getLogger(__name__)

PROXY_NAME = "loopwarden-mcp"
SESSION_HEADER = "mcp-session-id"


def upstream_client(command: list[str] | None = None, url: str | None = None) -> Client:
    """An SDK client of the wrapped server: a command run over stdio (with the proxy's environment and
    working directory, as a host would start it) or a streamable-HTTP URL."""
    if url:
        target: Any = url
    elif command:
        target = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ), cwd=os.getcwd())
    else:
        raise ValueError("give the server's command or its URL")
    return Client(target, mode="auto", cache=None, client_info=types.Implementation(name=PROXY_NAME, version="1"))


def client_name(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The host's name from ``initialize`` (or the modern request envelope), if it gave one."""
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    return info.name if info is not None and info.name else None


def session_of(ctx: ServerRequestContext[Any, Any], connection_id: str) -> str:
    """The MCP session of a request: ``Mcp-Session-Id`` when the transport has one, else the connection."""
    headers = getattr(ctx.request, "headers", None)
    session = headers.get(SESSION_HEADER) if headers is not None else None
    return session or connection_id


def _plain(params: Any) -> Any:
    """The host's params without its ``_meta`` (the host's envelope is not the wrapped server's)."""
    return params.model_copy(update={"meta": None}) if params is not None else None


def build_server(upstream: Client, gate: ToolGate, connection_id: str | None = None) -> Server[Any]:
    """A low-level ``Server`` that mirrors ``upstream`` (connected) and gates its tool calls."""
    caps = upstream.server_capabilities
    session = upstream.session
    connection = connection_id or f"mcp-{uuid.uuid4().hex[:16]}"

    def relay(request_type: type, result_type: type) -> Callable[..., Awaitable[Any]]:
        async def handler(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
            return await session.send_request(request_type(params=_plain(params)), result_type)

        return handler

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return await session.list_tools(params=_plain(params))

    async def call_tool(ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        async def forward() -> Any:
            return await session.call_tool(
                params.name,
                params.arguments,
                input_responses=params.input_responses,
                request_state=params.request_state,
                allow_input_required=True,
            )

        if params.request_state is not None or params.input_responses:
            return await forward()  # a later round of a call already decided (input the server asked for)
        return await gate.call(
            gate.ref(client_name(ctx), session_of(ctx, connection)), params.name, params.arguments, forward
        )

    handlers: dict[str, Any] = {}
    if caps.tools is not None:
        handlers.update(on_list_tools=list_tools, on_call_tool=call_tool)
    if caps.resources is not None:
        handlers.update(
            on_list_resources=relay(types.ListResourcesRequest, types.ListResourcesResult),
            on_list_resource_templates=relay(types.ListResourceTemplatesRequest, types.ListResourceTemplatesResult),
            on_read_resource=relay(types.ReadResourceRequest, types.ReadResourceResult),
        )
    if caps.prompts is not None:
        handlers.update(
            on_list_prompts=relay(types.ListPromptsRequest, types.ListPromptsResult),
            on_get_prompt=relay(types.GetPromptRequest, types.GetPromptResult),
        )
    if caps.completions is not None:
        handlers.update(on_completion=relay(types.CompleteRequest, types.CompleteResult))
    info = upstream.server_info
    return Server(
        info.name if info is not None and info.name else PROXY_NAME,
        version=info.version if info is not None else "",
        title=info.title if info is not None else None,
        instructions=upstream.instructions,
        **handlers,
    )


@asynccontextmanager
async def proxied(upstream: Client, gate: ToolGate) -> AsyncIterator[Server[Any]]:
    """Connect to the wrapped server, yield the proxy's ``Server``; on exit end the runs and disconnect."""
    async with upstream:
        try:
            yield build_server(upstream, gate)
        finally:
            await gate.close()


async def serve_stdio(upstream: Client, gate: ToolGate) -> None:
    """Serve the host over this process's stdin/stdout (what hosts launch)."""
    from mcp.server.stdio import stdio_server

    async with proxied(upstream, gate) as server, stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(upstream: Client, gate: ToolGate, host: str, port: int, path: str = "/mcp") -> None:
    """Serve streamable HTTP at ``http://host:port/path`` (one run per ``Mcp-Session-Id``)."""
    import uvicorn

    async with proxied(upstream, gate) as server:
        app = server.streamable_http_app(streamable_http_path=path, host=host)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        await uvicorn.Server(config).serve()
