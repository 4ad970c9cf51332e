"""``loopwarden hook HOST`` against the service's HTTP contract: what it asks, what it answers each host.

The service here is a recording HTTP server that answers ``/v1/check`` with a scripted
action (the real service is in tests/hooks/test_claude_code.py, test_codex.py and test_gemini.py, with
the real CLIs). Cursor cannot be installed here: its cases are its documented contract.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from loopwarden.hooks import install
from loopwarden.hooks.command import run_hook
from loopwarden.hooks.exchange import digest, flatten_deep


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[tuple[str, dict, dict]] = []  # (path, body, headers)
        self.action = "allow"
        self.warning: dict | None = None  # what /v1/result hands back: the call's check warned
        self.abort: dict | None = None  # what /v1/result hands back: the run is aborted

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def paths(self) -> list[str]:
        return [p for p, _, _ in self.seen]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Recorder

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append((self.path, body, dict(self.headers)))
        if self.path == "/v1/check":
            action = self.server.action
            out = {
                "action": action,
                "proceed": action in ("allow", "warn"),
                "detector": None if action == "allow" else "generic_repeat",
                "count": 20,
                "message": None if action == "allow" else f"{action.upper()}: stop repeating Bash",
                "verdict_id": None if action == "allow" else "v-1",
                "source": "local",
                "failed_open": False,
                "run_id": body.get("run_id") or "run-made-by-service",
                "tool_call_id": body.get("tool_call_id") or "call-made-by-service",
            }
        elif self.path == "/v1/result":
            out = {"ok": True, "paired": True, "warning": self.server.warning, "abort": self.server.abort}
        elif self.path == "/v1/run_start":
            out = {"run_id": body.get("run_id") or "r-new"}
        else:
            out = {"ok": True}
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch):
    server = Recorder()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("LOOPWARDEN_SIDECAR_URL", server.url)
    monkeypatch.delenv("LOOPWARDEN_AGENT_ID", raising=False)
    yield server
    server.shutdown()
    server.server_close()


def hook(host: str, data: dict, *flags: str) -> tuple[dict | None, str]:
    out, err = run_hook([host, *flags], json.dumps(data).encode())
    return (json.loads(out) if out else None), err


CLAUDE_PRE = {
    "session_id": "s-1",
    "prompt_id": "p-1",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "make test"},
    "tool_use_id": "toolu_1",
}


def test_claude_code_block_denies_with_the_verdict_text_and_acks_through_the_veto(service: Recorder) -> None:
    service.action = "block"
    out, err = hook("claude-code", CLAUDE_PRE)
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "BLOCK: stop repeating Bash",
        },
        # the person at the keyboard reads a line too, built from the verdict's fields (never its text)
        "systemMessage": "loopwarden blocked a Bash call (generic_repeat, count 20)",
    }
    assert err == ""
    (_, check, _), (_, result, _) = service.seen
    assert check == {
        "agent_id": "claude-code",
        "session_id": "s-1",
        "run_id": "p-1",
        "tool_name": "Bash",
        "params": {"command": "make test"},
        "tool_call_id": "toolu_1",
    }
    assert service.paths() == ["/v1/check", "/v1/result"]
    assert result["tool_call_id"] == "toolu_1" and result["run_id"] == "p-1"
    assert result["blocked"] is True and "result" not in result


def test_claude_code_warn_is_context_for_the_model_and_acked(service: Recorder) -> None:
    service.action = "warn"
    out, _ = hook("claude-code", CLAUDE_PRE)
    assert out == {
        "hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "WARN: stop repeating Bash"},
        "systemMessage": "loopwarden warned the agent about a Bash call (generic_repeat, count 20)",
    }
    assert service.paths() == ["/v1/check", "/v1/ack"]
    assert service.seen[1][1] == {
        "agent_id": "claude-code",
        "session_id": "s-1",
        "run_id": "p-1",
        "verdict_id": "v-1",
        "outcome": "applied",
    }


def test_claude_code_allow_prints_nothing_so_the_hosts_own_permissions_apply(service: Recorder) -> None:
    assert hook("claude-code", CLAUDE_PRE) == (None, "")
    assert service.paths() == ["/v1/check"]


def test_claude_code_abort_ends_the_session(service: Recorder) -> None:
    service.action = "abort"
    out, _ = hook("claude-code", CLAUDE_PRE)
    assert out is not None and out["continue"] is False and out["stopReason"] == "ABORT: stop repeating Bash"
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert out["systemMessage"] == "loopwarden ended the session at a Bash call (generic_repeat, count 20)"


def test_the_user_line_names_the_hosts_tool_where_the_host_has_a_field_for_it(service: Recorder) -> None:
    """The line names the tool as the host calls it; it takes from the answer only a detector that is
    an identifier and an integer count (a listener posing as the service picks the message text)."""
    service.action = "block"
    pre = CLAUDE_PRE | {"tool_name": "mcp__x__y"}
    out, _ = hook("claude-code", pre)
    assert out["systemMessage"] == "loopwarden blocked a mcp__x__y call (generic_repeat, count 20)"
    gemini = {"session_id": "s", "hook_event_name": "BeforeTool", "tool_name": "x", "tool_input": {}}
    assert hook("gemini", gemini)[0]["systemMessage"] == "loopwarden blocked a x call (generic_repeat, count 20)"


def test_claude_code_prompt_starts_a_run_and_stop_ends_it_post_reports_results_and_errors(service: Recorder) -> None:
    base = {"session_id": "s-1", "prompt_id": "p-2"}
    assert hook("claude-code", base | {"hook_event_name": "UserPromptSubmit", "prompt": "fix it"}) == (None, "")
    post = CLAUDE_PRE | base | {"hook_event_name": "PostToolUse", "tool_response": {"stdout": "ok"}}
    hook("claude-code", post)
    failure = CLAUDE_PRE | base | {"hook_event_name": "PostToolUseFailure", "error": "exit 2"}
    hook("claude-code", failure)
    hook("claude-code", base | {"hook_event_name": "Stop"})
    hook("claude-code", base | {"hook_event_name": "PreCompact", "trigger": "auto"})
    assert service.paths() == ["/v1/run_start", "/v1/result", "/v1/result", "/v1/run_end", "/v1/compaction"]
    bodies = [b for _, b, _ in service.seen]
    assert bodies[0] == {"agent_id": "claude-code", "session_id": "s-1", "run_id": "p-2"}
    assert bodies[1]["result"] == "ok" and "error" not in bodies[1]  # Bash: the text the model is shown
    assert bodies[1]["tool_call_id"] == "toolu_1" and bodies[1]["run_id"] == "p-2"
    assert bodies[2]["error"] == "exit 2" and "result" not in bodies[2]
    assert bodies[3] == {"agent_id": "claude-code", "session_id": "s-1", "run_id": "p-2"}
    assert bodies[4]["reason"] == "auto"


def test_agent_id_from_the_environment_or_the_flag(service: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWARDEN_AGENT_ID", "alice-laptop")
    hook("claude-code", CLAUDE_PRE)
    hook("claude-code", CLAUDE_PRE, "--agent-id", "bob-laptop")
    assert [b["agent_id"] for _, b, _ in service.seen] == ["alice-laptop", "bob-laptop"]


def test_token_file_sends_a_bearer_token(service: Recorder, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    hook("claude-code", CLAUDE_PRE, "--token-file", str(token))
    assert service.seen[0][2]["Authorization"] == "Bearer s3cret"


def test_codex_names_the_run_by_turn_and_cannot_end_the_session_before_a_call(service: Recorder) -> None:
    service.action = "abort"
    pre = {"session_id": "s-c", "turn_id": "t-1", "hook_event_name": "PreToolUse", "tool_name": "Bash"}
    out, _ = hook("codex", pre | {"tool_input": {"command": "ls"}, "tool_use_id": "call_1"})
    assert out == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "ABORT: stop repeating Bash",
        },
        "systemMessage": "loopwarden ended the session at a Bash call (generic_repeat, count 20)",
    }
    assert service.seen[0][1]["run_id"] == "t-1" and service.seen[0][1]["agent_id"] == "codex"


def test_codex_compaction_arms_the_guard_for_its_turn(service: Recorder) -> None:
    """Codex's PreCompact input (its schema: session_id, turn_id, trigger) reports a compaction of the run."""
    assert "PreCompact" in install.EVENTS["codex"]
    pre = {"session_id": "s-x", "turn_id": "t-4", "hook_event_name": "PreCompact", "trigger": "auto"}
    assert hook("codex", pre | {"cwd": "/w", "model": "m", "transcript_path": None}) == (None, "")
    assert service.seen[0][:2] == (
        "/v1/compaction",
        {"agent_id": "codex", "session_id": "s-x", "run_id": "t-4", "reason": "auto"},
    )


def test_an_abort_answered_with_a_result_ends_the_session_where_the_host_allows_it(service: Recorder) -> None:
    """The post-compaction guard aborts on a result, and a worker's abort may land while a call runs:
    the result's answer carries it. Claude Code ends the session there; Cursor cannot end one and
    tells the model; Codex ignores continue: false after a call (measured with codex exec 0.171.0),
    so its hook says nothing and acks nothing there: the run's next call is denied (and acked)."""
    service.abort = {"message": "ABORT: the loop outlived the compaction", "verdict_id": "v-a", "run_id": "t-1"}
    post = {"session_id": "s-x", "turn_id": "t-1", "hook_event_name": "PostToolUse", "tool_name": "Bash"}
    post |= {"tool_use_id": "call_1", "tool_input": {"command": "ls"}, "tool_response": "same"}
    out, _ = hook("codex", post)
    assert out is None and service.paths() == ["/v1/result"]  # no claim, no ack of an abort not applied
    out, _ = hook("claude-code", post | {"prompt_id": "p-1"})
    assert out == {
        "continue": False,
        "stopReason": "ABORT: the loop outlived the compaction",
        "systemMessage": "loopwarden ended the session at a Bash call (loop detection)",
    }
    assert service.paths() == ["/v1/result", "/v1/result", "/v1/ack"] and service.seen[2][1]["verdict_id"] == "v-a"
    cursor = {"conversation_id": "c", "generation_id": "g", "hook_event_name": "postToolUse", "tool_name": "Shell"}
    out, _ = hook("cursor", cursor | {"tool_input": {}, "tool_output": "same"})
    assert out == {"additional_context": "ABORT: the loop outlived the compaction"}
    service.abort = None
    assert hook("codex", post)[0] is None  # a healthy run's result: nothing to say


def test_gemini_has_no_ids_and_gets_its_warning_with_the_result(service: Recorder) -> None:
    pre = {"session_id": "s-g", "hook_event_name": "BeforeTool", "tool_name": "run_shell_command"}
    pre["tool_input"] = {"command": "ls"}
    service.action = "warn"
    assert hook("gemini", pre) == (None, "")  # BeforeTool cannot add context
    check = service.seen[0][1]
    assert check["run_id"] is None and check["tool_call_id"] is None
    service.warning = {"message": "WARN: 10 identical calls", "verdict_id": "v-9", "run_id": "r-g"}
    post = pre | {"hook_event_name": "AfterTool", "tool_response": {"llmContent": "a b", "returnDisplay": "a b"}}
    out, _ = hook("gemini", post)
    assert out == {
        "hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": "WARN: 10 identical calls"},
        "systemMessage": "loopwarden warned the agent about a run_shell_command call (loop detection)",
    }
    assert service.paths() == ["/v1/check", "/v1/result", "/v1/ack"]
    assert service.seen[1][1]["result"] == "a b" and service.seen[1][1]["tool_call_id"] is None
    assert service.seen[2][1]["verdict_id"] == "v-9" and service.seen[2][1]["run_id"] == "r-g"


def test_gemini_block_and_abort_in_its_own_form(service: Recorder) -> None:
    pre = {"session_id": "s-g", "hook_event_name": "BeforeTool", "tool_name": "run_shell_command", "tool_input": {}}
    service.action = "block"
    assert hook("gemini", pre)[0] == {
        "decision": "deny",
        "reason": "BLOCK: stop repeating Bash",
        "systemMessage": "loopwarden blocked a run_shell_command call (generic_repeat, count 20)",
    }
    # the service named the call: the veto's result carries that id (no pairing needed)
    assert service.seen[1][1]["tool_call_id"] == "call-made-by-service"
    service.action = "abort"
    out = hook("gemini", pre)[0]
    assert out is not None and out["continue"] is False and out["stopReason"] == "ABORT: stop repeating Bash"


def test_gemini_prompt_starts_a_run_the_service_names(service: Recorder) -> None:
    hook("gemini", {"session_id": "s-g", "hook_event_name": "BeforeAgent", "prompt": "hi"})
    hook("gemini", {"session_id": "s-g", "hook_event_name": "AfterAgent"})
    assert service.paths() == ["/v1/run_start", "/v1/run_end"]
    assert service.seen[0][1] == {"agent_id": "gemini", "session_id": "s-g"}


def test_cursor_documented_contract(service: Recorder) -> None:
    base = {"conversation_id": "conv-1", "generation_id": "gen-1"}
    shell = base | {"hook_event_name": "beforeShellExecution", "command": "npm test", "cwd": "/w"}
    service.action = "block"
    out, _ = hook("cursor", shell)
    assert out == {
        "permission": "deny",
        "user_message": "BLOCK: stop repeating Bash",
        "agent_message": "BLOCK: stop repeating Bash",
    }
    check = service.seen[0][1]
    assert (check["session_id"], check["run_id"], check["tool_name"]) == ("conv-1", "gen-1", "Shell")
    assert check["params"] == {"command": "npm test"}
    mcp = base | {"hook_event_name": "beforeMCPExecution", "tool_name": "search", "tool_input": '{"q": "x"}'}
    service.action = "allow"
    hook("cursor", mcp)
    assert service.seen[-1][1]["params"] == {"q": "x"}
    assert hook("cursor", base | {"hook_event_name": "beforeSubmitPrompt", "prompt": "go"})[0] == {"continue": True}
    service.warning = {"message": "WARN: loop", "verdict_id": "v-2", "run_id": "gen-1"}
    post = base | {"hook_event_name": "postToolUse", "tool_name": "search", "tool_input": {}, "tool_output": "r"}
    assert hook("cursor", post)[0] == {"additional_context": "WARN: loop"}


def test_a_large_result_is_sent_as_a_digest_string_so_unequal_texts_stay_unequal(service: Recorder) -> None:
    """A digest must be a string: the rules hash a plain object on its details/content text only
    (RULES.md section 4.3), so every {"sha256", "chars"} object hashed the same: a false block at 21."""
    lines = "".join(f"line {i} of a long test log\n" for i in range(3000))  # ~80 KB
    outputs = [lines + "passed 1", lines + "passed 2", lines + "passed 2", "é" * 70_000]
    for out in outputs:
        hook("claude-code", CLAUDE_PRE | {"hook_event_name": "PostToolUse", "tool_response": out})
    sent = [body["result"] for _, body, _ in service.seen]
    for text, got in zip(outputs, sent, strict=True):
        sha = hashlib.sha256(text.encode()).hexdigest()
        assert got == f"[loopwarden digest sha256={sha} chars={len(text)}]"
    assert sent[0] != sent[1] and sent[1] == sent[2]
    small = [{"type": "text", "text": "ok"}]  # under the bound: sent as it is (an MCP tool's content)
    hook(
        "claude-code", CLAUDE_PRE | {"hook_event_name": "PostToolUse", "tool_response": small, "tool_name": "mcp__s__t"}
    )
    assert service.seen[-1][1]["result"] == small


@pytest.fixture(scope="module")
def live_service(tmp_path_factory: pytest.TempPathFactory):
    """A real decision service (OpenClaw's thresholds: warn at 10, block at 20)."""
    from loopwarden.sidecar.process import SidecarProcess

    config = Path(__file__).resolve().parents[2] / "deploy" / "config" / "loopwarden.json5"
    log = tmp_path_factory.mktemp("hook-sidecar") / "sidecar.log"
    proc = SidecarProcess(["--config", str(config)], log_path=log).start()
    yield proc
    proc.stop()


def run_calls(url: str, run: str, calls: list[tuple[dict | str, object]], tool: str = "Bash") -> list[int]:
    """Each (tool_input, tool_response) through PreToolUse then PostToolUse of one run; the calls denied (1-based)."""
    denied = []
    base = {"session_id": f"s-{run}", "prompt_id": run, "tool_name": tool}
    for n, (params, response) in enumerate(calls, 1):
        pre = base | {"hook_event_name": "PreToolUse", "tool_input": "PARAMS", "tool_use_id": f"{run}-{n}"}
        raw = params if isinstance(params, str) else json.dumps(params)  # a str: JSON too deep for json.dumps
        out, err = run_hook(["claude-code", "--url", url], json.dumps(pre).replace('"PARAMS"', raw).encode())
        assert not err, err
        if out and json.loads(out)["hookSpecificOutput"].get("permissionDecision") == "deny":
            denied.append(n)
            continue
        post = pre | {"hook_event_name": "PostToolUse", "tool_response": response}
        out, err = run_hook(["claude-code", "--url", url], json.dumps(post).replace('"PARAMS"', raw).encode())
        assert not err, err
    return denied


def test_large_outputs_differing_at_the_end_are_never_blocked_identical_ones_are(live_service) -> None:
    lines = "".join(f"line {i} of a long test log\n" for i in range(3000))  # ~80 KB
    cmd = {"command": "make test"}
    assert run_calls(live_service.url, "changing", [(cmd, lines + f"run {n}") for n in range(30)]) == []
    assert run_calls(live_service.url, "same", [(cmd, lines + "run 1")] * 22) == [21, 22]


def _nested(depth: int, n: int = 0) -> str:
    """``{"data": [[...["leaf"]...]], "n": n}`` nested ``depth`` deep, as JSON text."""
    return '{"data": ' + "[" * (depth - 1) + '"leaf"' + "]" * (depth - 1) + f', "n": {n}}}'


@pytest.mark.parametrize(
    "params",
    [
        lambda n: json.dumps({"content": "x" * (1 << 20), "n": n}),  # over the service's 1 MiB body
        lambda n: _nested(100, n),  # past the service's 64
        lambda n: _nested(5000, n),  # past what the json module parses
        lambda n: json.dumps({"command": "echo \ud800", "n": n}),  # a lone surrogate: not UTF-8
    ],
    ids=["over-1MiB", "depth-100", "depth-5000", "lone-surrogate"],
)
def test_params_too_large_deep_or_unencodable_are_still_decided(live_service, params, request) -> None:
    """Such params used to fail open on every call (25 identical, 0 denied): they are digested instead."""
    run = request.node.callspec.id
    assert run_calls(live_service.url, run, [(params(0), "same output")] * 21) == [21]
    unequal = [(params(n), "same output") for n in range(21)]  # each its own signature: never blocked
    assert run_calls(live_service.url, run + "-b", unequal) == []


def test_flatten_deep_digests_only_what_is_too_deep() -> None:
    raw = '{"a": "[{\\"\\\\", "b": [["x"]], "c": [[[["y"]]]]}'
    flat = json.loads(flatten_deep(raw.encode(), limit=3))
    assert flat["a"] == json.loads(raw)["a"] and flat["b"] == [["x"]]
    assert flat["c"] == [[digest('[["y"]]')]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_service_down_allows_with_one_line_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWARDEN_SIDECAR_URL", f"http://127.0.0.1:{_free_port()}")
    out, err = run_hook(["claude-code"], json.dumps(CLAUDE_PRE).encode())
    assert out == ""
    assert err.count("\n") == 1 and "did not answer" in err and "allowing" in err


def test_service_that_never_answers_is_given_up_after_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as listener:  # accepts (the kernel's backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        monkeypatch.setenv("LOOPWARDEN_SIDECAR_URL", f"http://127.0.0.1:{listener.getsockname()[1]}")
        out, err = run_hook(["claude-code", "--timeout", "0.2"], json.dumps(CLAUDE_PRE).encode())
    assert out == ""
    assert "TimeoutError" in err or "timed out" in err


def test_bad_input_and_bad_arguments_allow() -> None:
    assert run_hook(["claude-code"], b"not json")[0] == ""
    assert "not a JSON object" in run_hook(["claude-code"], b"[1]")[1]
    assert "host is one of" in run_hook(["vim"], b"{}")[1]


def test_the_installed_command_runs_without_site_and_loads_only_the_standard_library(service: Recorder) -> None:
    """What ``hook install`` writes, run as written: ``python -S hooks/run.py HOST``. Without ``site``
    only the standard library is on sys.path, so the launcher loads the package from its own folder;
    the run answers the host, and (``-X importtime`` lists every import) loads no site, no third-party
    package, nothing of loopwarden beyond the hooks, and not typing, runpy or the idna codec."""
    argv = shlex.split(install.hook_command("claude-code", _args("claude-code")))
    assert argv[:2] == [sys.executable, "-S"] and argv[2].endswith("/hooks/run.py") and argv[3] == "claude-code"
    event = {"session_id": "s1", "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_use_id": "t9"}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"LOOPWARDEN_SIDECAR_URL": service.url}
    service.action = "block"
    proc = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]],
        input=json.dumps(event | {"tool_input": {"command": "ls"}}).encode(),
        env=env,
        capture_output=True,
        cwd="/",
    )
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert service.paths()[0] == "/v1/check"
    mods = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.decode().splitlines() if "|" in line}
    assert "loopwarden.hooks.command" in mods and "site" not in mods
    assert {m for m in mods if m.startswith("loopwarden")} <= {
        "loopwarden",
        "loopwarden.hooks",
        "loopwarden.hooks.command",
        "loopwarden.hooks.exchange",
        "loopwarden.hooks.hosts",
        "loopwarden.hooks.service",
        "loopwarden.hooks.transcript",
    }
    assert not mods & {"msgspec", "typing", "argparse", "http.client", "asyncio", "encodings.idna", "runpy"}


def test_the_hook_path_imports_nothing_heavy() -> None:
    """The host starts the hook twice per tool call: no runner, msgspec, aiokafka, argparse or http.client."""
    code = (
        "import io, sys\n"
        "sys.stdin = io.TextIOWrapper(io.BytesIO(b'{}'))\n"
        "from loopwarden.cli import main\n"
        "main(['hook', 'claude-code'])\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    env = os.environ | {"LOOPWARDEN_SIDECAR_URL": "http://127.0.0.1:9"}
    mods = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout.split())
    assert "loopwarden.hooks.command" in mods
    heavy = {"msgspec", "aiokafka", "loopwarden.runner", "loopwarden.detection", "argparse", "http.client", "asyncio"}
    assert not heavy & mods


# --- install ---------------------------------------------------------------------------------


def _args(*argv: str):
    return install.build_parser().parse_args(list(argv))


def test_install_merges_into_existing_settings_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    mine = {"matcher": "Bash", "hooks": [{"type": "command", "command": "./my-guard.sh"}]}
    path.write_text(json.dumps({"model": "opus", "hooks": {"PreToolUse": [mine]}}))
    assert install.main(["claude-code", "--dir", str(tmp_path), "--agent-id", "dev-1"]) == 0
    assert install.main(["claude-code", "--dir", str(tmp_path), "--agent-id", "dev-2"]) == 0
    settings = json.loads(path.read_text())
    assert settings["model"] == "opus"
    pre = settings["hooks"]["PreToolUse"]
    assert pre[0] == mine and len(pre) == 2
    assert pre[1]["hooks"][0]["command"].endswith("/hooks/run.py claude-code --agent-id dev-2")
    assert set(settings["hooks"]) == set(install.EVENTS["claude-code"])


def test_install_writes_the_bytecode_a_hook_run_loads() -> None:
    """Where bytecode is not written by default (PYTHONDONTWRITEBYTECODE, as on this project's CI), each
    hook run would compile the hooks' sources again: install writes it."""
    import importlib.util

    sources = [install.LAUNCHER.parent.parent / "__init__.py", *install.LAUNCHER.parent.glob("*.py")]
    cached = [Path(importlib.util.cache_from_source(str(s))) for s in sources]
    for pyc in cached:
        pyc.unlink(missing_ok=True)
    assert install.main(["codex", "--print"]) == 0
    assert all(pyc.exists() for pyc in cached)
    assert install.precompile() == len(sources)


def test_install_refuses_to_rewrite_a_file_it_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text('{"hooks": {} // a comment\n}')
    assert install.main(["gemini", "--dir", str(tmp_path)]) == 1
    assert path.read_text() == '{"hooks": {} // a comment\n}'


def test_install_snippets_per_host(capsys: pytest.CaptureFixture[str]) -> None:
    gemini = install.snippet("gemini", _args("gemini"))["hooks"]
    assert gemini["BeforeTool"][0]["matcher"] == ".*" and gemini["BeforeTool"][0]["hooks"][0]["timeout"] == 10_000
    cursor = install.snippet("cursor", _args("cursor"))
    assert cursor["version"] == 1 and list(cursor["hooks"]["preToolUse"][0]) == ["command"]
    http = install.snippet("claude-code", _args("claude-code", "--http", "--url", "http://127.0.0.1:9000"))
    assert http["hooks"]["PreToolUse"][0]["hooks"][0] == {
        "type": "http",
        "url": "http://127.0.0.1:9000/v1/hooks/claude-code",
        "timeout": install.HOOK_TIMEOUT,
    }
    assert install.main(["codex", "--print"]) == 0
    assert json.loads(capsys.readouterr().out)["hooks"]["PreToolUse"][0]["matcher"] == "*"


def test_gemini_shell_results_drop_the_process_group_line_so_a_repeated_failure_is_identical(service: Recorder) -> None:
    post = {"session_id": "s-g", "hook_event_name": "AfterTool", "tool_name": "run_shell_command", "tool_input": {}}
    for pgid in (7063, 7069):
        output = f"<untrusted_context>\nOutput: boom\nProcess Group PGID: {pgid}\n</untrusted_context>"
        hook("gemini", post | {"tool_response": {"llmContent": output, "returnDisplay": "boom"}})
    first, second = (b["result"] for _, b, _ in service.seen)
    assert first == second == "<untrusted_context>\nOutput: boom\n</untrusted_context>"


def _claude_responses(n: int) -> dict[str, tuple[dict, dict]]:
    """(tool_input, tool_response) per Claude Code tool, as 2.1.197 gives them, the shown part varying with ``n``."""
    path = "/p/f.txt"
    return {
        "Bash": (
            {"command": "make test"},
            {"stdout": f"passed {n}", "stderr": "", "interrupted": False, "isImage": False},
        ),
        "Read": (
            {"file_path": path},
            {
                "type": "text",
                "file": {"filePath": path, "content": f"line {n}\n", "numLines": 2, "startLine": 1, "totalLines": 2},
            },
        ),
        "Grep": ({"pattern": "a"}, {"mode": "files_with_matches", "filenames": [f"f{n}.txt"], "numFiles": 1}),
        "Grep-content": (
            {"pattern": "a", "output_mode": "content"},
            {"mode": "content", "numFiles": 0, "filenames": [], "content": f"f.txt:1:a {n}", "numLines": 1},
        ),
        "Glob": (
            {"pattern": "*.txt"},
            {"filenames": [f"f{n}.txt"], "durationMs": 3, "numFiles": 1, "truncated": False},
        ),
    }


@pytest.mark.parametrize("tool", list(_claude_responses(0)))
def test_claude_code_tool_responses_hash_as_what_the_model_was_shown(live_service, tool: str) -> None:
    """A plain-object tool_response hashed alike for every call of a tool (Read, Grep, Glob, Bash):
    identical calls with changing output were blocked at 21. Mapped to the shown text, changing
    output is never blocked, identical output is (at 21), and a volatile field (Glob's duration) does not count."""
    name = tool.split("-")[0]
    changing = [_claude_responses(n)[tool] for n in range(25)]
    assert run_calls(live_service.url, f"map-{tool}", changing, tool=name) == []
    same = []
    for n in range(22):
        params, response = _claude_responses(0)[tool]
        same.append((params, response | ({"durationMs": n} if "durationMs" in response else {})))
    assert run_calls(live_service.url, f"map-same-{tool}", same, tool=name) == [21, 22]


def test_claude_code_edits_hash_as_the_message_the_model_reads_not_the_change(live_service) -> None:
    """The model reads "The file PATH has been updated successfully." for every Edit: an identical
    edit applied 21 times (the file grows each time) reads alike, as OpenClaw's own edit result does."""
    path = "/p/e.txt"
    params = {"file_path": path, "old_string": "a", "new_string": "ab"}
    edits = []
    for n in range(22):
        patch = [{"lines": [f"-a{'b' * n}", f"+a{'b' * (n + 1)}"]}]
        edits.append((params, {"filePath": path, "oldString": "a", "newString": "ab", "structuredPatch": patch}))
    assert run_calls(live_service.url, "edits", edits, tool="Edit") == [21, 22]
    user = [(params, edits[0][1] | {"userModified": n % 2 == 0}) for n in range(22)]  # the user changed it: shown
    assert run_calls(live_service.url, "edits-user", user, tool="Edit") == []


def test_claude_code_bash_output_saved_to_a_file_is_hashed_whole(tmp_path: Path, live_service) -> None:
    """A large Bash output reaches the hook cut to its first 30,000 characters (the whole is in
    ``persistedOutputPath``): outputs differing past the cut must stay unequal."""
    head = "".join(f"{i}\n" for i in range(15000))
    calls = []
    for n in range(25):
        saved = tmp_path / f"out{n}.txt"
        saved.write_text(head + f"end {n}\n")
        response = {"stdout": head[:30000], "stderr": "", "interrupted": False, "persistedOutputPath": str(saved)}
        calls.append(({"command": "make test"}, response))
    assert run_calls(live_service.url, "saved", calls) == []
    for n in range(1, 25):  # the same output saved again each time (another path): alike
        (tmp_path / f"out{n}.txt").write_text(head + "end 0\n")
    assert run_calls(live_service.url, "saved-same", calls[:22]) == [21, 22]


def test_a_saved_output_that_is_not_a_regular_file_is_not_read(tmp_path: Path) -> None:
    """The saved-output path comes in the hook input: a FIFO there would hold the hook for ever."""
    from loopwarden.hooks.hosts import claude_shown

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    response = {"stdout": "start of it", "stderr": "", "persistedOutputPath": str(fifo)}
    assert claude_shown("Bash", response) == "start of it"
    saved = tmp_path / "out.txt"
    saved.write_text("é" * 10)
    text = claude_shown("Bash", response | {"persistedOutputPath": str(saved)})
    assert text == digest("é" * 10)  # the same form and digest as any large text


# --- what of a response is hashed: what the model was shown (CODEX.md, GEMINI.md) ----------------


def _rollout(path: Path, *items: dict) -> str:
    """A Codex transcript (rollout) holding ``items``: (kind, payload) lines as Codex writes them."""
    with open(path, "w") as f:
        for kind, payload in items:
            f.write(json.dumps({"timestamp": "t", "type": kind, "payload": payload}, separators=(",", ":")) + "\n")
    return str(path)


def _call(call_id: str, cmd: str) -> tuple[str, dict]:
    args = json.dumps({"cmd": cmd})
    return "response_item", {"type": "function_call", "name": "exec_command", "arguments": args, "call_id": call_id}


def _output(call_id: str, text: object) -> tuple[str, dict]:
    return "response_item", {"type": "function_call_output", "call_id": call_id, "output": text}


def _done(call_id: str, code: int) -> tuple[str, dict]:
    item = {"type": "CommandExecution", "id": call_id, "aggregated_output": "x", "exit_code": code}
    return "event_msg", {"type": "item_completed", "item": item}


CODEX = {"session_id": "s-c", "turn_id": "t-1", "tool_name": "Bash", "tool_input": {"command": "make"}}


def test_codex_shell_outcome_carries_the_exit_code_the_model_reads(service: Recorder, tmp_path: Path) -> None:
    """The shell's tool_response is its output alone; the model reads the exit code beside it, so a
    command whose output stays the same while its exit code changes is not an identical outcome."""
    results = []
    for code in (0, 1):
        path = _rollout(tmp_path / f"r{code}.jsonl", _call("call_1", "make"), _done("call_1", code))
        post = CODEX | {"hook_event_name": "PostToolUse", "tool_use_id": "call_1", "transcript_path": path}
        hook("codex", post | {"tool_response": "same\n"})
        results.append(service.seen[-1][1]["result"])
    assert results == ["Process exited with code 0\nOutput:\nsame\n", "Process exited with code 1\nOutput:\nsame\n"]
    hook("codex", CODEX | {"hook_event_name": "PostToolUse", "tool_use_id": "c", "tool_response": "same\n"})
    assert service.seen[-1][1]["result"] == "same\n"  # no transcript: the output alone (fails open)


def test_codex_reads_back_the_outcomes_no_post_hook_reported(service: Recorder, tmp_path: Path) -> None:
    """apply_patch through the shell fires PreToolUse and no PostToolUse: at the next PreToolUse (or the
    Stop) the hook reports the previous turn's outputs from the transcript, pending_only, without the
    lines Codex makes new on every run (chunk id, wall time)."""
    patch = "apply_patch <<'EOF'\n*** Begin Patch\n...\nEOF\n"
    failed = "apply_patch verification failed: Failed to read file to update missing.txt"
    shell = "Chunk ID: 5eefc5\nWall time: 0.0012 seconds\nProcess exited with code 0\n"
    shell += "Original token count: 1\nOutput:\nok\n"
    path = _rollout(
        tmp_path / "rollout.jsonl",
        _call("call_0", "ls"),
        _output("call_0", shell),
        _call("call_1", patch),
        _call("call_2", "make"),
        _output("call_1", failed),
        _output("call_2", shell.replace("5eefc5", "77aa01")),
        _call("call_3", patch),
    )
    pre = CODEX | {"hook_event_name": "PreToolUse", "tool_use_id": "call_3", "transcript_path": path}
    hook("codex", pre)
    assert service.paths() == ["/v1/result", "/v1/result", "/v1/check"]
    late = [body for _, body, _ in service.seen[:2]]
    assert [(b["tool_call_id"], b["result"], b["pending_only"], b["run_id"]) for b in late] == [
        ("call_1", failed, True, "t-1"),
        ("call_2", "Process exited with code 0\nOriginal token count: 1\nOutput:\nok\n", True, "t-1"),
    ]
    service.seen.clear()
    hook("codex", {"session_id": "s-c", "turn_id": "t-1", "hook_event_name": "Stop", "transcript_path": path})
    assert service.paths() == ["/v1/result", "/v1/result", "/v1/run_end"]
    service.seen.clear()
    hook("codex", pre | {"transcript_path": str(tmp_path / "gone.jsonl")})
    assert service.paths() == ["/v1/check"]  # no transcript: nothing read back


def test_codex_mcp_and_object_outcomes_are_the_json_the_model_reads(service: Recorder) -> None:
    """An MCP result with structuredContent is shown as that JSON; a built-in's object (get_goal) as its
    JSON: a plain object would hash on details/content alone, alike for every call."""
    post = CODEX | {"hook_event_name": "PostToolUse", "tool_use_id": "c"}
    mcp = {"content": [{"type": "text", "text": "x"}], "structuredContent": {"content": "hello\n"}}
    hook("codex", post | {"tool_name": "mcp__fs__read_text_file", "tool_response": mcp})
    hook("codex", post | {"tool_name": "get_goal", "tool_response": {"goal": "ship it", "remainingTokens": 5}})
    hook(
        "codex", post | {"tool_name": "apply_patch", "tool_response": "Exit code: 0\nWall time: 1 seconds\nOutput:\nok"}
    )
    assert [b["result"] for _, b, _ in service.seen] == [
        '{"content": "hello\\n"}',
        '{"goal": "ship it", "remainingTokens": 5}',
        "Exit code: 0\nOutput:\nok",
    ]


def test_gemini_error_is_the_message_the_model_reads_and_a_warning_rides_on_it(service: Recorder) -> None:
    """A failed call's model reply is {"error": error.message} and carries no hook context, so the
    warning handed back with its result is AfterTool's deny: the reason becomes the error the model
    reads, the call's own error first. A fatal error (no_space_left) is left as it is."""
    post = {"session_id": "s-g", "hook_event_name": "AfterTool", "tool_name": "replace", "tool_input": {}}
    error = {"message": "Could not find an exact match for 'old_string'", "type": "edit_no_occurrence_found"}
    response = {"llmContent": "Could not find ...", "returnDisplay": "Error", "error": error}
    service.warning = {"message": "WARNING: You have called replace 10 times <x>", "verdict_id": "v-3", "run_id": "r"}
    out, _ = hook("gemini", post | {"tool_response": response})
    assert service.seen[0][1]["error"] == "Could not find an exact match for 'old_string'"
    assert out == {
        "decision": "deny",
        "reason": "Could not find an exact match for 'old_string'\n\n"
        "<hook_context>WARNING: You have called replace 10 times &lt;x&gt;</hook_context>",
        "systemMessage": "loopwarden warned the agent about a replace call (loop detection)",
    }
    assert service.paths() == ["/v1/result", "/v1/ack"]
    fatal = response | {"error": {"message": "no space", "type": "no_space_left"}}
    assert hook("gemini", post | {"tool_response": fatal})[0] is None


def test_cursor_outcomes_stay_unequal_when_what_the_model_reads_differs(service: Recorder) -> None:
    """Cursor documents its outputs as text (postToolUse's tool_output, afterMCPExecution's result_json:
    JSON text); an object in their place is sent as its JSON text, so two different outputs never
    hash alike (a plain object is hashed on details/content alone, RULES.md 4.3)."""
    from loopwarden.detection.hashing import outcome_hash

    base = {"conversation_id": "c", "generation_id": "g", "hook_event_name": "postToolUse", "tool_name": "Read"}
    for output in ('{"content":"a"}', {"file": "a.txt", "text": "one"}, {"file": "a.txt", "text": "two"}):
        hook("cursor", base | {"tool_input": {"path": "a.txt"}, "tool_output": output, "duration": 12})
    sent = [b["result"] for _, b, _ in service.seen]
    assert sent[0] == '{"content":"a"}'
    hashes = {outcome_hash("read", {"path": "a.txt"}, result, None, has_result=True) for result in sent}
    assert len(hashes) == 3


def test_a_hostile_transcript_reads_as_nothing_quickly(tmp_path: Path) -> None:
    """The transcript path comes in the hook input: a FIFO (would block the open), a device, a folder,
    one line of 20 MB without a newline, binary garbage and lines that only look like Codex's all read
    as nothing, within the scan bound (at most 8 MB read)."""
    from loopwarden.hooks import transcript

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.jsonl"
    huge.write_bytes(b'{"type":"response_item","payload":{"type":"function_call_output","output":"' + b"x" * (20 << 20))
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(os.urandom(1 << 20) + b'\n{"type":"response_item","payload":[1]}\n{"type":"response_item"\n')
    for path in (str(fifo), "/dev/zero", str(tmp_path), str(huge), str(garbage), "bad\x00path", None, 7):
        assert transcript.previous_outputs(path) == []
        assert transcript.exit_code(path, "call_1") is None
    assert sum(len(line) for line in transcript.lines_backwards(str(huge))) <= transcript.MAX_SCAN
