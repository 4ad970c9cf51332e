"""Scripted local model servers for the real coding-agent CLIs (Claude Code, Gemini CLI, Codex CLI).

One HTTP server speaks the three wire protocols, each on its own path:

- Anthropic Messages (``POST /v1/messages``, SSE when ``stream`` is true): Claude Code;
- Gemini ``:streamGenerateContent?alt=sse`` and ``:generateContent`` (the router's and
  the next-speaker checks' JSON calls): Gemini CLI;
- OpenAI Responses (``POST /v1/responses``, SSE): Codex CLI.

It is stateless: each answer is a function of the request alone. The model asks for
``script(n)`` (a tool name and its arguments) while the request carries ``n < calls`` tool
results, then answers a final text, so the CLIs' side requests (titles, routing, token
counts) never shift the script. Every request body is kept in ``requests``, so a test
asserts on what the model received (a hook's block text arrives as a tool result).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (tool name, arguments) the model asks for after n tool results: the host's own tool names
# (Claude Code "Bash" {"command"}, Gemini CLI "run_shell_command" {"command"}, Codex
# "exec_command" {"cmd"}).
Script = Callable[[int], tuple[str, dict[str, Any]]]

FINAL_TEXT = "All done."


def repeat(tool: str, args: dict[str, Any]) -> Script:
    """The same call every time: a loop."""
    return lambda n: (tool, dict(args))


def first_then(first: tuple[str, dict[str, Any]], then: tuple[str, dict[str, Any]]) -> Script:
    """One call (a Read before Edits), then the same call every time."""
    return lambda n: (first[0], dict(first[1])) if n == 0 else (then[0], dict(then[1]))


def progress(tool: str, key: str, template: str) -> Script:
    """A different call each time (``template`` formatted with the step): a healthy session."""
    return lambda n: (tool, {key: template.format(n=n)})


@dataclass
class Behaviour:
    script: Script
    calls: int


@dataclass
class FakeModel:
    """The server's state: the behaviour per protocol and what each request carried."""

    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, protocol: str, script: Script, calls: int) -> None:
        """protocol: 'anthropic', 'gemini' or 'openai'."""
        with self.lock:
            self.behaviours[protocol] = Behaviour(script, calls)

    def record(self, path: str, body: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append({"path": path, "body": body})

    def bodies(self, path_part: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r["body"] for r in self.requests if path_part in r["path"]]

    def clear(self) -> None:
        with self.lock:
            self.requests.clear()


# --- counting tool results in a request, per protocol -------------------------------------


def anthropic_tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for message in body.get("messages") or []:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            out += [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return out


def gemini_tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Distinct by id: a resumed Gemini CLI session sends each earlier function response twice."""
    out, seen = [], set()
    for content in body.get("contents") or []:
        for part in content.get("parts") or []:
            if isinstance(part, dict) and "functionResponse" in part:
                response = part["functionResponse"]
                key = response.get("id") or len(out)
                if key not in seen:
                    seen.add(key)
                    out.append(response)
    return out


def openai_tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    items = body.get("input")
    if not isinstance(items, list):
        return []
    return [
        i for i in items if isinstance(i, dict) and i.get("type") in ("function_call_output", "custom_tool_call_output")
    ]


def result_text(item: Any) -> str:
    """The text of one tool result as the model received it, whatever its shape (for assertions)."""
    return json.dumps(item, ensure_ascii=False)


# --- answers ------------------------------------------------------------------------------


def _sse(events: list[tuple[str | None, dict[str, Any]]]) -> bytes:
    chunks = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        chunks.append(f"{head}data: {json.dumps(data)}\n\n")
    return "".join(chunks).encode()


def anthropic_answer(body: dict[str, Any], b: Behaviour | None) -> tuple[str, bytes]:
    n = len(anthropic_tool_results(body))
    model = body.get("model", "claude-fake")
    usage = {"input_tokens": 10, "output_tokens": 5}
    tool = None
    if b is not None and body.get("tools") and n < b.calls:
        tool = b.script(n)
    if tool is not None:
        block = {"type": "tool_use", "id": f"toolu_fake_{n:04d}", "name": tool[0], "input": tool[1]}
        stop = "tool_use"
    else:
        block = {"type": "text", "text": FINAL_TEXT}
        stop = "end_turn"
    if not body.get("stream"):
        message = {"id": f"msg_fake_{n}", "type": "message", "role": "assistant", "model": model}
        message |= {"content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage}
        return "application/json", json.dumps(message).encode()
    start = {"id": f"msg_fake_{n}", "type": "message", "role": "assistant", "model": model, "content": []}
    start |= {"stop_reason": None, "stop_sequence": None, "usage": usage}
    events: list[tuple[str | None, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    if tool is not None:
        empty = {"type": "tool_use", "id": block["id"], "name": tool[0], "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(tool[1])}
    else:
        empty = {"type": "text", "text": ""}
        delta = {"type": "text_delta", "text": FINAL_TEXT}
    events += [
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": empty}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}, "usage": usage},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "text/event-stream", _sse(events)


def gemini_answer(path: str, body: dict[str, Any], b: Behaviour | None) -> tuple[str, bytes]:
    usage = {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15}
    if ":countTokens" in path:
        return "application/json", json.dumps({"totalTokens": 10}).encode()
    if ":generateContent" in path:
        # The CLI's JSON side calls (model router, next-speaker check): one object answering both.
        text = json.dumps(
            {
                "complexity_reasoning": "a scripted test",
                "complexity_score": 1,
                "reasoning": "the model is done",
                "next_speaker": "user",
            }
        )
        candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}
        return "application/json", json.dumps({"candidates": [candidate], "usageMetadata": usage}).encode()
    n = len(gemini_tool_results(body))
    tool = b.script(n) if b is not None and body.get("tools") and n < b.calls else None
    part = {"functionCall": {"name": tool[0], "args": tool[1]}} if tool is not None else {"text": FINAL_TEXT}
    candidate = {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
    chunk = {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-fake"}
    if "alt=sse" not in path:
        return "application/json", json.dumps([chunk]).encode()
    return "text/event-stream", _sse([(None, chunk)])


def openai_answer(body: dict[str, Any], b: Behaviour | None) -> tuple[str, bytes]:
    n = len(openai_tool_results(body))
    tool = b.script(n) if b is not None and body.get("tools") and n < b.calls else None
    rid = f"resp_fake_{n}"
    if tool is not None and isinstance(tool[1], str):  # a freeform tool (Codex's apply_patch): its raw input
        item = {"type": "custom_tool_call", "id": f"ctc_fake_{n}", "call_id": f"call_fake_{n:04d}", "name": tool[0]}
        item |= {"input": tool[1], "status": "completed"}
    elif tool is not None:
        namespace, _, name = tool[0].rpartition("/")  # "mcp__fs/read_text_file": a tool of a namespace
        item = {"type": "function_call", "id": f"fc_fake_{n}", "call_id": f"call_fake_{n:04d}", "name": name}
        item |= {"arguments": json.dumps(tool[1]), "status": "completed"} | (
            {"namespace": namespace} if namespace else {}
        )
    else:
        item = {"type": "message", "id": f"msg_fake_{n}", "role": "assistant", "status": "completed"}
        item |= {"content": [{"type": "output_text", "text": FINAL_TEXT, "annotations": []}]}
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    response = {"id": rid, "object": "response", "status": "completed", "model": body.get("model", "fake")}
    events: list[tuple[str | None, dict[str, Any]]] = [
        (
            "response.created",
            {"type": "response.created", "response": response | {"status": "in_progress", "output": []}},
        ),
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item}),
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        (
            "response.completed",
            {"type": "response.completed", "response": response | {"output": [item], "usage": usage}},
        ),
    ]
    return "text/event-stream", _sse(events)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # model lists, health probes: an empty, valid answer
        self._send(200, "application/json", json.dumps({"data": [], "models": [], "object": "list"}).encode())

    def do_HEAD(self) -> None:
        self._send(200, "application/json", b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.headers.get("Content-Encoding") == "zstd" or not raw:
            body: dict[str, Any] = {}
        else:
            try:
                body = json.loads(raw)
            except ValueError:
                body = {}
        fake = self.server.fake
        fake.record(self.path, body)
        with fake.lock:
            behaviours = dict(fake.behaviours)
        if "/messages/count_tokens" in self.path:
            kind, out = "application/json", json.dumps({"input_tokens": 10}).encode()
        elif "/messages" in self.path:
            kind, out = anthropic_answer(body, behaviours.get("anthropic"))
        elif "/responses" in self.path:
            kind, out = openai_answer(body, behaviours.get("openai"))
        elif "/models/" in self.path:
            kind, out = gemini_answer(self.path, body, behaviours.get("gemini"))
        else:
            kind, out = "application/json", b"{}"
        self._send(200, kind, out)

    def _send(self, status: int, kind: str, out: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(out)))
        if kind == "text/event-stream":
            self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(out)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeModel


class FakeModelServer:
    """The server on a free loopback port, in a thread: ``with FakeModelServer() as fm: fm.url``."""

    def __init__(self) -> None:
        self.fake = FakeModel()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self.fake
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
