"""Real hosts looping on a proxied MCP tool: Claude Code and Gemini CLI, driven offline by a scripted model.

Claude Code (the npm release) starts ``loopwarden mcp`` from its ``--mcp-config`` around the
in-test tool server; the scripted model asks for the same ``echo`` call again and again. What
the model receives is the evidence: the 11th result carries the warning, the 21st and later
are tool errors carrying the block's text (Claude Code hands ``isError`` results to the model).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from loopwarden.mcpgate.install import main as install_main
from tests.hosts.fake_models import FakeModelServer, anthropic_tool_results, gemini_tool_results, repeat
from tests.hosts.harness import ClaudeCode, GeminiCli, claude_binary
from tests.mcpgate.test_mcp_proxy import CONFIG, NO_BROKER, TOOL_SERVER

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOOL = "mcp__tools__echo"  # Claude Code names an MCP tool mcp__<server>__<tool>
CALLS = 40


def result_text(result: dict) -> str:
    content = result.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content or [] if isinstance(block, dict))


def test_claude_code_looping_on_a_proxied_mcp_tool_is_blocked_at_20_and_sees_why(tmp_path):
    with FakeModelServer() as fm:
        host = ClaudeCode(tmp_path, fm.url)
        proxy = ["-m", "loopwarden.cli", "mcp", "--config", str(CONFIG), "--bootstrap", NO_BROKER, "--", *TOOL_SERVER]
        servers = {"mcpServers": {"tools": {"type": "stdio", "command": sys.executable, "args": proxy}}}
        mcp_config = host.root / "mcp.json"
        mcp_config.write_text(json.dumps(servers))
        # Claude Code connects MCP servers in the background: the model waits for them first, as it is told to
        loop = repeat(TOOL, {"text": "same"})
        fm.fake.set(host.protocol, lambda n: ("WaitForMcpServers", {}) if n == 0 else loop(n), calls=CALLS + 1)
        argv = [str(claude_binary()), "-p", "echo it", "--output-format", "json"]
        argv += ["--mcp-config", str(mcp_config), "--strict-mcp-config", "--allowedTools", f"{TOOL},WaitForMcpServers"]
        proc = host._run(argv, timeout=240)
        assert proc.returncode == 0, proc.stderr[-2000:]
        bodies = [b for b in fm.fake.bodies("/v1/messages") if len(anthropic_tool_results(b)) == CALLS + 1]
        assert bodies, f"the model never got {CALLS} results: {proc.stdout[-2000:]}"
        results = anthropic_tool_results(bodies[-1])[1:]
    # on a loaded machine Claude Code may not list the tool yet when the wait returns: such calls are refused
    # by Claude Code itself and never reach the proxy (a few; the loop goes on long enough)
    results = [r for r in results if "No such tool available" not in result_text(r)]
    assert len(results) >= 21, [result_text(r) for r in results]
    texts = [result_text(r) for r in results]
    errors = [bool(r.get("is_error")) for r in results]
    assert texts[:10] == ["same"] * 10 and texts[11:20] == ["same"] * 9
    assert texts[10].startswith("same") and "[loopwarden] WARNING: You have called echo 10 times" in texts[10]
    assert errors == [False] * 20 + [True] * (len(results) - 20)
    for text in texts[20:]:
        assert text == (
            "CRITICAL: Called echo with identical arguments and identical outcomes 20 times. "
            "Session execution blocked to prevent runaway loops."
        )


def test_claude_code_shows_the_warning_of_a_structured_result_and_needs_no_wait_with_nonblocking_off(tmp_path):
    """A tool whose result has structuredContent: Claude Code hands the model structuredContent, so the
    warning must be in it. The server entry is the one `loopwarden mcp install claude-code` writes. And
    MCP.md's advice for headless runs: with MCP_CONNECTION_NONBLOCKING=false Claude Code waits for its
    MCP servers, so the model's very first call is the proxied tool (no WaitForMcpServers) and every
    call reaches the proxy."""
    tool, calls = "mcp__tools__jobs", 12
    with FakeModelServer() as fm:
        host = ClaudeCode(tmp_path, fm.url)
        host.extra_env["MCP_CONNECTION_NONBLOCKING"] = "false"
        # the entry as `loopwarden mcp install` writes it (absolute paths; Claude Code runs it with its own PATH)
        install = ["claude-code", "--dir", str(host.root), "--name", "tools", "--config", str(CONFIG)]
        assert install_main([*install, "--bootstrap", NO_BROKER, "--", *TOOL_SERVER]) == 0
        mcp_config = host.root / ".mcp.json"
        fm.fake.set(host.protocol, repeat(tool, {}), calls=calls)
        argv = [str(claude_binary()), "-p", "count the jobs", "--output-format", "json"]
        argv += ["--mcp-config", str(mcp_config), "--strict-mcp-config", "--allowedTools", tool]
        proc = host._run(argv, timeout=240)
        assert proc.returncode == 0, proc.stderr[-2000:]
        bodies = [b for b in fm.fake.bodies("/v1/messages") if len(anthropic_tool_results(b)) == calls]
        assert bodies, f"the model never got {calls} results: {proc.stdout[-2000:]}"
        texts = [result_text(r) for r in anthropic_tool_results(bodies[-1])]
    assert all("No such tool available" not in text for text in texts), texts[:2]
    shown = [json.loads(text) for text in texts]  # what the model read: the structuredContent, as JSON
    assert shown[:10] == [{"jobs": 3}] * 10 and shown[11] == {"jobs": 3}
    assert shown[10]["jobs"] == 3
    assert shown[10]["loopwarden_warning"].startswith("[loopwarden] WARNING: You have called jobs 10 times")


def test_gemini_cli_with_the_entry_mcp_install_writes_is_warned_at_10_and_blocked_at_20(tmp_path):
    """Gemini CLI (its project settings.json, merged by `loopwarden mcp install gemini`) names the proxied
    tool mcp_<server>_<tool>; the model reads the warning with the 11th result and the block as the 21st's
    error."""
    calls = 22
    with FakeModelServer() as fm:
        host = GeminiCli(tmp_path, fm.url)
        install = ["gemini", "--dir", str(host.project), "--name", "tools", "--config", str(CONFIG)]
        assert install_main([*install, "--bootstrap", NO_BROKER, "--", *TOOL_SERVER]) == 0
        fm.fake.set(host.protocol, repeat("mcp_tools_echo", {"text": "same"}), calls=calls)
        proc = host.run("echo it", timeout=240)
        assert proc.returncode == 0, proc.stderr[-2000:]
        bodies = [b for b in fm.fake.bodies("streamGenerateContent") if len(gemini_tool_results(b)) == calls]
        assert bodies, f"the model never got {calls} results: {proc.stdout[-2000:]}"
        responses = [r["response"] for r in gemini_tool_results(bodies[-1])]
    outputs = [r.get("output", "") for r in responses]
    assert all("same" in out and "loopwarden" not in out for out in outputs[:10] + outputs[11:20])
    assert "[loopwarden] WARNING: You have called echo 10 times" in outputs[10]
    for blocked in responses[20:]:
        assert "CRITICAL: Called echo with identical arguments and identical outcomes 20 times" in blocked["error"]


def test_the_claude_mcp_add_line_mcp_install_prints_connects_in_claude_code(tmp_path, capsys):
    """`mcp install claude-code` also prints Claude Code's own command; run as printed (the real `claude`),
    Claude Code adds the server and its health check connects through the proxy."""
    install = ["claude-code", "--print", "--dir", str(tmp_path), "--name", "files", "--config", str(CONFIG)]
    assert install_main([*install, "--bootstrap", NO_BROKER, "--", *TOOL_SERVER]) == 0
    line = next(x for x in capsys.readouterr().err.splitlines() if "claude mcp add" in x).split("command: ", 1)[1]
    argv = shlex.split(line)
    assert argv[:4] == ["claude", "mcp", "add", "files"]
    claude = str(claude_binary())
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    added = subprocess.run([claude, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stderr
    listed = subprocess.run([claude, "mcp", "list"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "files:" in listed.stdout and "Connected" in listed.stdout, listed.stdout + listed.stderr
