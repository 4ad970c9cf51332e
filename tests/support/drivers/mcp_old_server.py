"""An MCP server that speaks only the 2024-11-05 revision, written by hand (newline-delimited JSON-RPC
on stdio): the SDK's own server always answers with a revision it knows, so an older peer is built here.

It knows ``initialize``, ``tools/list`` and ``tools/call`` (one tool, ``echo``); anything else,
``server/discover`` included, is "method not found", as a 2024 server answers it.
"""

from __future__ import annotations

import json
import sys

VERSION = "2024-11-05"
ECHO = {
    "name": "echo",
    "description": "Echo the text back.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}


def answer(request: dict) -> dict | None:
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        return None  # a notification
    if method == "initialize":
        result = {
            "protocolVersion": VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "old", "version": "0.1"},
        }
    elif method == "tools/list":
        result = {"tools": [ECHO]}
    elif method == "tools/call":
        text = str((request.get("params") or {}).get("arguments", {}).get("text", ""))
        result = {"content": [{"type": "text", "text": text}]}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
