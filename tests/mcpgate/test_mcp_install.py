"""``loopwarden mcp install HOST``: the host's MCP entry with absolute paths, merged into its file.

Each host's file is written as the host reads it, and the rest of it is kept: other servers and
settings, numbers as written, comments and layout (TOML), the file's mode, a symlink. The entry
itself is run: the SDK's client starts it as a host would and lists the proxied server's tools.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from loopwarden.mcpgate.install import HEADLESS_NOTE, main

REPO = Path(__file__).resolve().parents[2]
CLONE_CONFIG = REPO / "deploy" / "config" / "loopwarden.json5"
MCP_MD = REPO / "streams" / "mcpgate" / "MCP.md"
TOOL_SERVER = [sys.executable, str(REPO / "tests" / "support" / "drivers" / "mcp_tool_server.py")]


def proxied(entry_args: list[str]) -> tuple[list[str], list[str]]:
    split = entry_args.index("--")
    return entry_args[:split], entry_args[split + 1 :]


def assert_absolute_proxy(command: str, args: list[str], server: list[str]) -> None:
    own, wrapped = proxied(args)
    assert Path(command).is_absolute() and os.access(command, os.X_OK)
    assert own[0] == "mcp" and own[own.index("--config") + 1] == str(CLONE_CONFIG)
    assert wrapped == server


def test_claude_code_keeps_the_rest_of_the_file_its_mode_numbers_and_symlink(tmp_path, capsys):
    real = tmp_path / "shared.json"
    written = '{\n  "mcpServers": {"other": {"command": "x", "timeout": 1.50, "n": 1e3}},\n'
    written += '  "big": 10000000000000000000001\n}\n'
    real.write_text(written)
    real.chmod(0o600)
    (tmp_path / ".mcp.json").symlink_to(real)
    assert main(["claude-code", "--dir", str(tmp_path), "--name", "files", "--", "srv", "--root", "."]) == 0
    assert (tmp_path / ".mcp.json").is_symlink() and stat.S_IMODE(real.stat().st_mode) == 0o600
    text = real.read_text()
    for literal in ('"timeout": 1.50', '"n": 1e3', '"big": 10000000000000000000001'):
        assert literal in text  # numbers as written, not as Python would print them
    data = json.loads(text)
    assert list(data["mcpServers"]) == ["other", "files"]
    entry = data["mcpServers"]["files"]
    assert entry["type"] == "stdio"
    assert_absolute_proxy(entry["command"], entry["args"], ["srv", "--root", "."])
    err = capsys.readouterr().err
    assert "claude mcp add files -- " in err and HEADLESS_NOTE in err and "MCP_CONNECTION_NONBLOCKING=false" in err
    assert main(["claude-code", "--dir", str(tmp_path), "--name", "files", "--", "srv", "--root", "."]) == 0
    assert real.read_text() == text  # twice changes nothing


def test_codex_config_toml_keeps_comments_and_layout(tmp_path, monkeypatch):
    home = tmp_path / "codex-home"
    home.mkdir()
    written = (
        '# my settings\nmodel = "o3"  # keep this\n\n[mcp_servers.other]\ncommand = "x"\nstartup_timeout_sec = 1.50\n'
    )
    (home / "config.toml").write_text(written)
    monkeypatch.setenv("CODEX_HOME", str(home))
    assert main(["codex", "--name", "files", "--", "srv"]) == 0
    text = (home / "config.toml").read_text()
    assert text.startswith(written)
    data = tomllib.loads(text)
    assert data["model"] == "o3" and data["mcp_servers"]["other"] == {"command": "x", "startup_timeout_sec": 1.5}
    entry = data["mcp_servers"]["files"]
    assert_absolute_proxy(entry["command"], entry["args"], ["srv"])


def test_gemini_settings_keep_other_settings(tmp_path):
    settings = tmp_path / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"model": {"disableLoopDetection": true}, "hooks": {"BeforeTool": []}}')
    assert main(["gemini", "--dir", str(tmp_path), "--name", "files", "--url", "http://127.0.0.1:9/mcp"]) == 0
    data = json.loads(settings.read_text())
    assert data["model"] == {"disableLoopDetection": True} and data["hooks"] == {"BeforeTool": []}
    args = data["mcpServers"]["files"]["args"]
    assert args[-2:] == ["--url", "http://127.0.0.1:9/mcp"] and "--" not in args


@pytest.mark.parametrize(
    ("case", "argv", "named"),
    [
        ("not json", ["claude-code", "--name", "f", "--", "srv"], "is not JSON"),
        ("missing config", ["claude-code", "--name", "f", "--config", "/nope/lw.json5", "--", "srv"], "--config"),
        ("no server", ["claude-code", "--name", "f"], "'--'"),
        ("no folder", ["gemini", "--dir", "/nope/project", "--name", "f", "--", "srv"], "--dir"),
    ],
)
def test_bad_inputs_are_one_line_and_leave_the_file_alone(case, argv, named, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".mcp.json").write_text('{"mcpServers": {,}}')
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err and "Traceback" not in err
    assert (tmp_path / ".mcp.json").read_text() == '{"mcpServers": {,}}'


@pytest.mark.parametrize(
    ("text", "mode", "named"),
    [
        ('{"mcpServers": {}, "mcpServers": {}}', 0o644, "twice"),  # which one the host reads is its own affair
        ('{"mcpServers": {}}', 0o444, "read-only"),
    ],
)
def test_a_file_the_hooks_would_not_rewrite_is_left_alone_too(text, mode, named, tmp_path, capsys):
    """One reader and writer for every settings file (``loopwarden.hooks.install``): what ``hook install``
    refuses, ``mcp install`` refuses the same way."""
    settings = tmp_path / ".mcp.json"
    settings.write_text(text)
    settings.chmod(mode)
    assert main(["claude-code", "--dir", str(tmp_path), "--name", "f", "--", "srv"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err, err
    assert settings.read_text() == text and stat.S_IMODE(settings.stat().st_mode) == mode


def doc_block() -> str:
    """MCP.md's install commands (the shell block after the line that names them)."""
    text = MCP_MD.read_text()
    match = re.search(r"<!-- mcp-install -->\n```sh\n(.*?)```", text, re.S)
    assert match, "MCP.md lost its install block"
    return match.group(1)


async def test_mcp_mds_install_commands_work_as_printed(tmp_path):
    """The block runs as printed from the clone (HOME is a fresh folder holding the project), and the entry
    it writes starts the proxy as a host does: absolute paths, no PATH, another working directory."""
    import mcp.types as types
    from mcp import Client, StdioServerParameters

    (tmp_path / "myapp").mkdir()
    env = {**os.environ, "HOME": str(tmp_path), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    done = subprocess.run(["bash", "-euc", doc_block()], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    entry = json.loads((tmp_path / "myapp" / ".mcp.json").read_text())["mcpServers"]["files"]
    own, wrapped = proxied(entry["args"])
    assert wrapped[:3] == ["npx", "-y", "@modelcontextprotocol/server-filesystem"]
    # the wrapped server is the entry's own business (npx fetches it): here the proxy wraps the test's server
    params = StdioServerParameters(
        command=entry["command"],
        args=[*own, "--bootstrap", "127.0.0.1:1", "--", *TOOL_SERVER],
        cwd=str(tmp_path),
        env={},
    )
    async with Client(params, mode="auto", cache=None, client_info=types.Implementation(name="t", version="1")) as c:
        assert "echo" in [tool.name for tool in (await c.list_tools()).tools]
