"""``loopwarden mcp``: an MCP proxy that decides every ``tools/call`` with the runner's local decisions.

Named ``mcpgate`` so that inside this package ``import mcp`` is the official MCP SDK
(streams/mcpgate/MCP.md).
"""
