"""Run the real coding-agent CLIs headless against a scripted local model (``fake_models``).

Each host gets a throwaway home/config folder and a project folder under ``root``, a
minimal environment (no inherited variables: nothing reaches the network but the fake
model on loopback) and a ``timeout`` on every run. ``hooks_file`` is where the host reads
its hook settings (what ``loopwarden hook install`` writes); ``shell(command)`` is the
tool call the fake model makes to run ``command`` with the host's own shell tool.

    with FakeModelServer() as fm:
        host = ClaudeCode(tmp_path, fm.url)
        fm.fake.set(host.protocol, repeat(*host.shell("echo hi")), calls=3)
        proc = host.run("do it")
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.hosts.install import CLAUDE_CODE, CODEX_CLI, GEMINI_CLI, bin_path, npm_package

BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


def claude_binary() -> Path:
    """Claude Code's native executable: the npm package's ``bin/claude.exe`` is a stub that its
    postinstall script replaces, and the cache installs with ``--ignore-scripts``."""
    path = npm_package(CLAUDE_CODE) / "node_modules" / "@anthropic-ai" / "claude-code-linux-x64" / "claude"
    if not path.exists():
        import pytest

        pytest.fail(f"{CLAUDE_CODE} installed no native binary at {path}")
    return path


class Host:
    name = ""
    protocol = ""  # the fake model's protocol: anthropic | gemini | openai
    hooks_file: Path

    def __init__(self, root: Path, model_url: str) -> None:
        self.root = root / self.name
        self.home = self.root / "home"
        self.project = self.root / "project"
        self.home.mkdir(parents=True, exist_ok=True)
        self.project.mkdir(parents=True, exist_ok=True)
        self.model_url = model_url
        self.extra_env: dict[str, str] = {}

    def shell(self, command: str) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return {"PATH": BASE_PATH, "HOME": str(self.home), "LANG": "C.UTF-8", **self.extra_env}

    def write_hooks(self, settings: dict[str, Any]) -> None:
        """Merge ``settings`` (a ``{"hooks": ...}`` block) into the host's hook file."""
        current = json.loads(self.hooks_file.read_text()) if self.hooks_file.exists() else {}
        current.update(settings)
        self.hooks_file.parent.mkdir(parents=True, exist_ok=True)
        self.hooks_file.write_text(json.dumps(current, indent=2))

    def _run(self, argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            cwd=self.project,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


class ClaudeCode(Host):
    name = "claude-code"
    protocol = "anthropic"

    def __init__(self, root: Path, model_url: str) -> None:
        super().__init__(root, model_url)
        self.config = self.root / "config"
        self.config.mkdir(exist_ok=True)
        self.hooks_file = self.project / ".claude" / "settings.json"
        self.allowed_tools = "Bash"
        self.extra_args: list[str] = []

    def add_hook(self, event: str, matcher: str, command: str) -> None:
        """One more command hook beside loopwarden's (a test's own: it changes the world or records)."""
        settings = json.loads(self.hooks_file.read_text()) if self.hooks_file.exists() else {}
        entry = {"matcher": matcher, "hooks": [{"type": "command", "command": command}]}
        settings.setdefault("hooks", {}).setdefault(event, []).append(entry)
        self.hooks_file.parent.mkdir(parents=True, exist_ok=True)
        self.hooks_file.write_text(json.dumps(settings, indent=2))

    def mcp_server(self, name: str, command: list[str]) -> None:
        """An MCP server of the session (``--mcp-config``); headless Claude Code waits for it to connect."""
        config = self.root / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {name: {"command": command[0], "args": command[1:]}}}))
        self.extra_args += ["--mcp-config", str(config)]
        self.extra_env["MCP_CONNECTION_NONBLOCKING"] = "false"

    def shell(self, command: str) -> tuple[str, dict[str, Any]]:
        return "Bash", {"command": command, "description": "run it"}

    def env(self) -> dict[str, str]:
        quiet = ("DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING", "DISABLE_AUTOUPDATER")
        quiet += ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_NON_ESSENTIAL_MODEL_CALLS")
        return super().env() | {
            "CLAUDE_CONFIG_DIR": str(self.config),
            "ANTHROPIC_BASE_URL": self.model_url,
            "ANTHROPIC_API_KEY": "dummy",
            **dict.fromkeys(quiet, "1"),
        }

    def run(self, prompt: str, *, session_id: str | None = None, resume: str | None = None, timeout: float = 180):
        argv = [str(claude_binary()), "-p", prompt, "--output-format", "json", "--allowedTools", self.allowed_tools]
        argv += self.extra_args
        if session_id:
            argv += ["--session-id", session_id]
        if resume:
            argv += ["--resume", resume]
        return self._run(argv, timeout)


class GeminiCli(Host):
    name = "gemini"
    protocol = "gemini"

    def __init__(self, root: Path, model_url: str) -> None:
        super().__init__(root, model_url)
        self.hooks_file = self.project / ".gemini" / "settings.json"
        user = self.home / ".gemini" / "settings.json"
        user.parent.mkdir(parents=True, exist_ok=True)
        user.write_text(
            json.dumps(
                {
                    "security": {"auth": {"selectedType": "gemini-api-key"}},
                    "privacy": {"usageStatisticsEnabled": False},
                    "telemetry": {"enabled": False},
                    "general": {"enableAutoUpdate": False},
                    # its own detector stops a run after a few identical calls: off, to test ours
                    "model": {"disableLoopDetection": True},
                }
            )
        )

    def shell(self, command: str) -> tuple[str, dict[str, Any]]:
        return "run_shell_command", {"command": command}

    def env(self) -> dict[str, str]:
        return super().env() | {
            "GEMINI_API_KEY": "dummy",
            "GOOGLE_GEMINI_BASE_URL": self.model_url,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "NO_COLOR": "1",
        }

    def run(self, prompt: str, *, resume: str | None = None, timeout: float = 180):
        argv = [str(bin_path(GEMINI_CLI, "gemini")), "-p", prompt, "--output-format", "json", "--yolo"]
        if resume:
            argv += ["--resume", resume]
        return self._run(argv, timeout)


class CodexCli(Host):
    name = "codex"
    protocol = "openai"

    def __init__(self, root: Path, model_url: str) -> None:
        super().__init__(root, model_url)
        self.codex_home = self.root / "codex-home"
        self.codex_home.mkdir(exist_ok=True)
        self.hooks_file = self.project / ".codex" / "hooks.json"
        (self.codex_home / "config.toml").write_text(
            'model = "fake-model"\nmodel_provider = "fake"\ncheck_for_update_on_startup = false\n'
            f'[projects."{self.project}"]\ntrust_level = "trusted"\n'
            "[model_providers.fake]\n"
            f'name = "fake"\nbase_url = "{model_url}/v1"\nwire_api = "responses"\nenv_key = "FAKE_API_KEY"\n'
            "request_max_retries = 0\nstream_max_retries = 0\n"
        )

    def shell(self, command: str) -> tuple[str, dict[str, Any]]:
        return "exec_command", {"cmd": command}

    def env(self) -> dict[str, str]:
        return super().env() | {"CODEX_HOME": str(self.codex_home), "FAKE_API_KEY": "dummy"}

    def run(self, prompt: str, *, resume: str | None = None, timeout: float = 180):
        argv = [str(bin_path(CODEX_CLI, "codex")), "exec"]
        if resume:
            argv += ["resume", resume]
        argv += ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        argv += ["--dangerously-bypass-hook-trust", "--disable", "plugins", "--disable", "apps", prompt]
        return self._run(argv, timeout)


def session_of(host: Host, proc: subprocess.CompletedProcess[str]) -> str | None:
    """The session id a headless run printed (to resume it with a second prompt)."""
    if isinstance(host, CodexCli):
        for line in proc.stdout.splitlines():
            if '"thread.started"' in line:
                return json.loads(line).get("thread_id")
        return None
    start = proc.stdout.find("{")
    try:
        return json.loads(proc.stdout[start:]).get("session_id") if start >= 0 else None
    except ValueError:
        return None
