"""Claude Code with ``loopwarden hook`` installed, against a scripted model and a live decision service.

The real CLI (pinned in tests/hosts/install.py) runs headless; its hooks run the real hook
command, which asks a ``loopwarden sidecar`` process (OpenClaw's thresholds, no broker: it
decides locally). What the model received is read from the model server (tests/hosts/scenarios.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from loopwarden.sidecar.process import SidecarProcess
from tests.hosts import scenarios
from tests.hosts.claude_tools import CASES, Case
from tests.hosts.fake_models import first_then, repeat
from tests.hosts.harness import ClaudeCode
from tests.hosts.install import CLAUDE_CODE, MCP_FILESYSTEM, bin_path, version_of

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class TestClaudeCode(scenarios.HostTests):
    host_class = ClaudeCode

    def test_an_http_hook_straight_at_the_service_warns_and_blocks_alike(self, tmp_path: Path, model, service) -> None:
        """``install --http``: Claude Code posts its hook JSON to /v1/hooks/claude-code; no hook process."""
        host = ClaudeCode(tmp_path, model.url)
        scenarios.install_hooks(host, service.url, None, "--http")
        assert '"type": "http"' in host.hooks_file.read_text()
        scenarios.looping_session_is_warned_at_10_and_blocked_at_20(host, model)

    def test_the_users_own_socket_needs_no_url_on_either_side(self, tmp_path: Path, model) -> None:
        """Issue 44 item 10: the service started with no address and the hook installed with no
        ``--url`` meet on the user's own socket (``$HOME/.loopwarden/run/sidecar.sock``; a short root:
        a socket's path is at most 107 bytes)."""
        import shutil
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="lw-"))
        host = ClaudeCode(root, model.url)
        env = {"HOME": str(host.home), "LOOPWARDEN_RUNNER_BOOTSTRAP": ""}
        args = ["--config", str(scenarios.LOOP_CONFIG)]
        service = SidecarProcess(args, log_path=tmp_path / "sidecar.log", env=env, as_given=True).start()
        try:
            assert service.urls == [f"unix:{host.home}/.loopwarden/run/sidecar.sock"]
            scenarios.install_hooks(host, None)
            assert "--url" not in host.hooks_file.read_text()
            scenarios.looping_session_is_warned_at_10_and_blocked_at_20(host, model)
        finally:
            service.stop()
            shutil.rmtree(root, ignore_errors=True)

    def test_an_http_hook_with_a_token_file_is_let_in(self, tmp_path: Path, model) -> None:
        """F10: ``install --http --token-file F`` wrote no Authorization header, so every hook was 401
        and failed open. Claude Code now fills the header from ``LOOPWARDEN_SIDECAR_TOKEN``."""
        token = tmp_path / "token"
        token.write_text("tok-" + "7" * 32 + "\n")
        service = scenarios.sidecar(tmp_path / "sidecar.log", extra=["--token-file", str(token)])
        try:
            host = ClaudeCode(tmp_path, model.url)
            scenarios.install_hooks(host, service.url, None, "--http", "--token-file", str(token))
            assert "tok-" not in host.hooks_file.read_text()  # the token stays out of the settings file
            host.extra_env["LOOPWARDEN_SIDECAR_TOKEN"] = token.read_text().strip()
            scenarios.looping_session_is_warned_at_10_and_blocked_at_20(host, model)
        finally:
            service.stop()


def _filled(value: Any, project: Path) -> Any:
    return json.loads(json.dumps(value).replace("{P}", str(project)))


def run_tool_case(tmp_path: Path, model, service, case: Case) -> tuple[list[str], str, list[dict]]:
    """One case of tests/hosts/claude_tools.py: (each result the model read, the last request, every hook input)."""
    host = ClaudeCode(tmp_path, model.url)
    scenarios.install_hooks(host, service.url)
    if case.setup:
        subprocess.run(case.setup, shell=True, cwd=host.project, check=True, timeout=60)
    if case.changer:
        host.add_hook("PreToolUse", case.tool, f"cd {host.project} && {{ {case.changer}; }} >/dev/null")
    log = host.root / "hooks.log"
    for event in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        host.add_hook(event, "*", f"cat >> {log}; echo >> {log}")
    host.allowed_tools = ",".join(sorted({case.tool, "Read"}))
    if case.tool.startswith("mcp__fs__"):
        host.mcp_server("fs", [str(bin_path(MCP_FILESYSTEM, "mcp-server-filesystem")), str(host.project)])
    then = (case.tool, _filled(case.args, host.project))
    script = first_then(_filled(case.first, host.project), then) if case.first else repeat(*then)
    model.fake.clear()
    model.fake.set("anthropic", script, case.calls)
    scenarios.run_ok(host, "go")
    results, whole = scenarios.model_saw(model, host)
    hooks = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    return results, whole, hooks


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_each_tool_is_blocked_only_when_its_output_repeats(tmp_path: Path, model, service, case: Case) -> None:
    """Identical calls with changing, non-empty output (also over 64 KB, changing only at the end)
    run all 30; identical calls with identical output (success, failure) are refused from the 21st."""
    results, whole, hooks = run_tool_case(tmp_path, model, service, case)
    assert len(results) == case.calls, whole[-2000:]
    calls = results[1:] if case.first else results
    refused = [n for n, text in enumerate(calls, 1) if scenarios.CRITICAL.search(text)]
    seen = [h for h in hooks if h.get("tool_name") == case.tool]
    if case.unseen:  # Claude Code refuses these itself, before any hook: loopwarden never sees them
        assert all("tool_use_error" in text for text in calls), calls[0]
        assert seen == [] and refused == [] and not scenarios.WARNING.search(whole)
        return
    assert {h["hook_event_name"] for h in seen} >= {"PreToolUse"}
    if case.blocked_at is None:
        assert refused == [], (refused, calls[refused[0] - 1] if refused else "")
        shown = [json.loads(text).get("content") for text in calls]
        assert all(shown) and len({json.dumps(s) for s in shown}) == len(shown)  # non-empty, each different
    else:
        first = dict(case.blocked_at_in).get(version_of(CLAUDE_CODE), case.blocked_at)
        assert refused == list(range(first, len(calls) + 1)), refused
        assert scenarios.CRITICAL.search(calls[first - 1]).group(1) == "20"


def test_the_person_at_the_keyboard_sees_a_line_when_loopwarden_warns_or_blocks(tmp_path: Path, model, service) -> None:
    """``systemMessage``: Claude Code keeps it as a ``hook_system_message`` in the session's
    transcript and shows it to the user (the TUI; ``-p`` prints it with ``--include-hook-events``),
    not to the model."""
    host = ClaudeCode(tmp_path, model.url)
    scenarios.install_hooks(host, service.url)
    scenarios.looping_session_is_warned_at_10_and_blocked_at_20(host, model)
    lines = []
    for transcript in sorted((host.config / "projects").glob("*/*.jsonl")):
        for raw in transcript.read_text().splitlines():
            attachment = json.loads(raw).get("attachment")
            if isinstance(attachment, dict) and attachment.get("type") == "hook_system_message":
                lines.append(attachment["content"])
    assert lines[0] == "loopwarden warned the agent about a Bash call (generic_repeat, count 10)", lines
    assert "loopwarden blocked a Bash call (generic_repeat, count 20)" in lines
    assert not any("loopwarden blocked" in json.dumps(body) for body in model.fake.bodies("/messages"))
