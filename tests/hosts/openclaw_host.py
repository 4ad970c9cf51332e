"""OpenClaw (the npm release) driven offline: a scripted model, a config, one agent turn.

``openclaw agent --local`` runs a whole turn in-process against any
OpenAI-compatible chat-completions endpoint. :class:`ScriptedProvider` is that
endpoint on a loopback port: it answers each request from a script (a function
of the request's messages, so it is stateless: OpenClaw may send side
requests), as an SSE stream or a JSON body, whichever the request asks for,
and keeps every request it got. :func:`write_config` writes a config that
points the ``main`` agent at it; :func:`run_turn` runs one turn with a
throwaway HOME and a timeout and returns the parsed ``--json`` output with
the requests the model saw.

Used by the release tests (``tests/detection/test_openclaw_release.py``) and
by anything else that needs a real OpenClaw turn.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.hosts.install import OPENCLAW, bin_path, node24

MODEL_ID = "scripted"
PROVIDER = "fake"

# A reply: a final text (str) or a list of tool calls [(name, arguments dict), ...] in one assistant message.
Reply = str | list[tuple[str, dict]]
Script = Callable[[list[dict]], Reply]


def tool_results(messages: list[dict]) -> list[dict]:
    """The ``role: tool`` messages of a request, in order."""
    return [m for m in messages if m.get("role") == "tool"]


def text_of(message: dict) -> str:
    """A chat message's text (a string content or a list of text parts)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def repeat_script(calls: list[tuple[str, dict]], rounds: int, final: str = "done") -> Script:
    """The same assistant tool batch ``calls`` until the request carries ``rounds`` batches of results."""

    def script(messages: list[dict]) -> Reply:
        if len(tool_results(messages)) >= rounds * len(calls):
            return final
        return list(calls)

    return script


@dataclass
class ScriptedProvider:
    """An OpenAI-compatible ``/v1/chat/completions`` on 127.0.0.1 that plays the model from ``script``."""

    script: Script
    requests: list[dict] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _seq: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ScriptedProvider:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # /v1/models
                body = json.dumps({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                provider._answer(self, request)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _answer(self, handler: BaseHTTPRequestHandler, request: dict) -> None:
        with self._lock:
            self.requests.append(request)
            self._seq += 1
            seq = self._seq
        reply = self.script(request.get("messages") or [])
        if isinstance(reply, str):
            message: dict = {"role": "assistant", "content": reply}
            finish = "stop"
        else:
            calls = [
                {
                    "id": f"call_{seq}_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for i, (name, args) in enumerate(reply)
            ]
            message = {"role": "assistant", "content": None, "tool_calls": calls}
            finish = "tool_calls"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if request.get("stream"):
            delta = dict(message)
            if "tool_calls" in delta:
                delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(delta["tool_calls"])]
            chunks = [
                {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage},
            ]
            body = b"".join(
                b"data: "
                + json.dumps(dict(c, id=f"chatcmpl-{seq}", object="chat.completion.chunk", model=MODEL_ID)).encode()
                + b"\n\n"
                for c in chunks
            )
            body += b"data: [DONE]\n\n"
            ctype = "text/event-stream"
        else:
            body = json.dumps(
                {
                    "id": f"chatcmpl-{seq}",
                    "object": "chat.completion",
                    "model": MODEL_ID,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                }
            ).encode()
            ctype = "application/json"
        handler.send_response(200)
        handler.send_header("content-type", ctype)
        handler.send_header("content-length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def tool_turns(self) -> list[dict]:
        """The requests that carried tool results (the model saw them), in order."""
        return [r for r in self.requests if tool_results(r.get("messages") or [])]


def write_config(
    path: Path,
    base_url: str,
    *,
    loop_detection: dict | None = None,
    workspace: Path | None = None,
    extra: dict | None = None,
) -> Path:
    """An OpenClaw config (JSON) whose ``main`` agent uses the scripted model; loop detection on by default."""
    cfg: dict[str, Any] = {
        "models": {
            "providers": {
                PROVIDER: {
                    "baseUrl": base_url,
                    "apiKey": "dummy",
                    "api": "openai-completions",
                    "models": [
                        {
                            "id": MODEL_ID,
                            "name": MODEL_ID,
                            "contextWindow": 128000,
                            "maxTokens": 4096,
                            "compat": {"supportsTools": True},
                        }
                    ],
                }
            }
        },
        "agents": {"defaults": {"model": {"primary": f"{PROVIDER}/{MODEL_ID}"}}},
        "tools": {"loopDetection": {"enabled": True} if loop_detection is None else loop_detection},
    }
    if workspace is not None:
        cfg["agents"]["defaults"]["workspace"] = str(workspace)
    for key, value in (extra or {}).items():
        cfg[key] = value
    path.write_text(json.dumps(cfg, indent=2))
    return path


def openclaw_env(home: Path, config: Path) -> dict[str, str]:
    """A minimal environment: a throwaway HOME, the config, Node 24 first on PATH, no network beyond loopback."""
    node = node24()
    return {
        "HOME": str(home),
        "PATH": f"{node.parent}:/usr/bin:/bin",
        "OPENCLAW_CONFIG_PATH": str(config),
        "OPENCLAW_STATE_DIR": str(home / ".openclaw"),
        "NO_COLOR": "1",
        "LANG": "C.UTF-8",
    }


def openclaw(args: list[str], home: Path, config: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the release's CLI (``openclaw ARGS``) with Node 24 and the minimal environment."""
    cli = bin_path(OPENCLAW, "openclaw").resolve()
    return subprocess.run(
        [str(node24()), str(cli), *args],
        env=openclaw_env(home, config),
        cwd=str(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@dataclass
class Turn:
    """One ``openclaw agent --local`` turn: exit code, its ``--json`` output (None if unparsable), raw streams."""

    returncode: int
    output: Any
    stdout: str
    stderr: str
    requests: list[dict]


def _parse_json(stdout: str) -> Any:
    text = stdout.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        start = text.find("{")
        try:
            return json.loads(text[start:]) if start >= 0 else None
        except json.JSONDecodeError:
            return None


def run_turn(
    tmp: Path,
    script: Script,
    message: str = "go",
    *,
    session_id: str = "s-1",
    loop_detection: dict | None = None,
    timeout: float = 240,
    provider: ScriptedProvider | None = None,
    extra_config: dict | None = None,
) -> Turn:
    """One agent turn of OpenClaw against ``script``; HOME and config under ``tmp`` (reused: same session)."""
    home = tmp / "home"
    workspace = home / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    own = provider is None
    prov = provider or ScriptedProvider(script)
    if own:
        prov.__enter__()
    try:
        config = write_config(
            tmp / "openclaw.json", prov.base_url, loop_detection=loop_detection, workspace=workspace, extra=extra_config
        )
        proc = openclaw(
            ["agent", "--local", "--agent", "main", "--session-id", session_id, "--message", message, "--json"],
            home,
            config,
            timeout=timeout,
        )
        return Turn(proc.returncode, _parse_json(proc.stdout), proc.stdout, proc.stderr, list(prov.requests))
    finally:
        if own:
            prov.__exit__(None, None, None)


def release_dist() -> Path:
    """The release's compiled ``dist`` folder (detector, caller, agent core)."""
    return bin_path(OPENCLAW, "openclaw").resolve().parent / "dist"


def env_for_node() -> dict[str, str]:
    """The environment for a node script importing the release's dist modules."""
    return {"PATH": f"{node24().parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
