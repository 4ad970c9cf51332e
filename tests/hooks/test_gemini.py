"""Gemini CLI with ``loopwarden hook`` installed, against a scripted model and a live decision service.

The real CLI (pinned in tests/hosts/install.py) runs headless; its hooks run the real hook
command, which asks a ``loopwarden sidecar`` process (OpenClaw's thresholds, no broker: it
decides locally). What the model received is read from the model server (tests/hosts/scenarios.py).
"""

from __future__ import annotations

import pytest

from tests.hosts import scenarios
from tests.hosts.harness import GeminiCli
from tests.hosts.tool_rows import (
    CAPTURE,
    Row,
    RowHosts,
    changing_file,
    fixed_file,
    new_file_each_call,
    row_hosts,
    run_mcp_rows,
    run_row,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class TestGeminiCli(scenarios.HostTests):
    host_class = GeminiCli


# --- each tool, identical calls (issue 42): changing outputs are never refused; identical ones are ----
# Rows run at low thresholds (refused after 6 identical outcomes: the 7th call, index 6; OpenClaw
# emits no warning below a count of 10, its buckets are tens) unless they say "default" (OpenClaw's
# 10/20: warned on the 11th call, refused from the 21st). Gemini CLI shows a warning with the
# call's result: warn_at is the result that must carry it, a failure's included.


def _replaceable(project, n):  # the old string is back before each call, beside a line that changes
    (project / "r.txt").write_text(f"abc\nrun {n}\n")


ROWS = [
    Row(
        "shell, output grows (default)",
        "run_shell_command",
        {"command": "echo p >> poll.txt; wc -l poll.txt"},
        30,
        None,
    ),
    Row("shell, same output", "run_shell_command", {"command": "echo same"}, 8, 6),
    Row("shell, same failure", "run_shell_command", {"command": "cat missing.txt"}, 8, 6),
    Row(
        "shell, 80 KB changing in its last line",
        "run_shell_command",
        {"command": "cat big.txt"},
        30,
        None,
        world=changing_file("big.txt", large=True),
    ),
    Row("read_file, file grows", "read_file", {"file_path": "log.txt"}, 30, None, world=changing_file("log.txt")),
    Row(
        "read_file, 80 KB changing in its last line",
        "read_file",
        {"file_path": "big.txt"},
        30,
        None,
        world=changing_file("big.txt", large=True),
    ),
    Row(
        "read_file, same text",
        "read_file",
        {"file_path": "a.txt"},
        8,
        6,
        world=fixed_file("a.txt", "same\n"),
    ),
    Row("read_file, same failure", "read_file", {"file_path": "missing.txt"}, 8, 6),
    Row("read_file, same failure (default)", "read_file", {"file_path": "missing.txt"}, 22, 20, warn_at=10),
    Row(
        "write_file, same write",
        "write_file",
        {"file_path": "w.txt", "content": "abc\n"},
        8,
        6,
        world=fixed_file("w.txt", "old\n"),
    ),
    Row(
        "replace, the file changes",
        "replace",
        {"file_path": "r.txt", "old_string": "abc", "new_string": "abd", "instruction": "fix"},
        30,
        None,
        world=_replaceable,
    ),
    Row(
        "replace, same success",
        "replace",
        {"file_path": "a.txt", "old_string": "abc", "new_string": "abd", "instruction": "fix"},
        8,
        6,
        world=fixed_file("a.txt", "abc\n"),
    ),
    Row(
        "replace, same failure (default)",
        "replace",
        {"file_path": "a.txt", "old_string": "zzz", "new_string": "q", "instruction": "fix"},
        22,
        20,
        warn_at=10,
        world=fixed_file("a.txt", "abc\n"),
    ),
    Row(
        "grep_search, a match more each call",
        "grep_search",
        {"pattern": "match"},
        30,
        None,
        world=new_file_each_call("m{n}.log"),
    ),
    Row(
        "grep_search, same matches",
        "grep_search",
        {"pattern": "needle"},
        8,
        6,
        world=fixed_file("n.txt", "needle\n"),
    ),
    Row("grep_search, same no match", "grep_search", {"pattern": "nomatch_xyz"}, 8, 6),
    Row("glob, a file more each call", "glob", {"pattern": "*.log"}, 30, None, world=new_file_each_call("g{n}.log")),
    Row("glob, same files", "glob", {"pattern": "*.md"}, 8, 6, world=fixed_file("x.md", "x\n")),
]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, model, low_service, service) -> RowHosts:
    return row_hosts(GeminiCli, tmp_path_factory, model, low_service, service)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_each_tool(row, hosts, model):
    host = hosts.for_row(row)
    for stale in host.project.glob("*.log"):
        stale.unlink()
    _, stderr = run_row(host, model, row)
    if row.block_at is not None:
        # the person at the keyboard is told too: headless, Gemini CLI prints a hook's systemMessage
        assert f"loopwarden blocked a {row.tool} call (" in stderr, stderr[-2000:]
    else:
        assert "loopwarden blocked" not in stderr
    if row.warn_at is not None:
        assert f"loopwarden warned the agent about a {row.tool} call" in stderr


def test_an_mcp_tool(tmp_path, model, low_service):
    """The filesystem MCP server's read_text_file (the model calls it mcp_fs_read_text_file): a file that
    grows between identical reads is never refused; the same text, or the same failure, is."""
    import json

    from tests.hosts.install import MCP_FILESYSTEM, bin_path

    host = GeminiCli(tmp_path, model.url)
    scenarios.install_hooks(host, low_service.url)
    settings = json.loads(host.hooks_file.read_text())
    server = str(bin_path(MCP_FILESYSTEM, "mcp-server-filesystem"))
    settings["mcpServers"] = {"fs": {"command": server, "args": [str(host.project)], "trust": True}}
    host.hooks_file.write_text(json.dumps(settings))
    read = "mcp_fs_read_text_file"
    run_mcp_rows(host, model, read)


def test_the_outcome_hashed_is_what_the_model_read(tmp_path, model):
    """The mapping, checked against the real CLI: for each built-in tool, success and failure, the
    outcome the hook reports (Gemini.parse of the real AfterTool input) is exactly the functionResponse
    the model received ({"output": ...} or {"error": ...}), the process group line aside."""
    import json
    import sys

    from loopwarden.hooks.hosts import HOSTS

    host = GeminiCli(tmp_path, model.url)
    script, captured = tmp_path / "capture.py", tmp_path / "after.jsonl"
    script.write_text(CAPTURE)
    command = f"CAPTURE={captured} {sys.executable} {script}"
    host.write_hooks({"hooks": {"AfterTool": [{"matcher": ".*", "hooks": [{"type": "command", "command": command}]}]}})
    (host.project / "a.txt").write_text("abc\nline\n")
    calls = [
        ("run_shell_command", {"command": "echo out; echo err >&2"}),
        ("run_shell_command", {"command": "echo out; exit 3"}),
        ("read_file", {"file_path": "a.txt"}),
        ("read_file", {"file_path": "missing.txt"}),
        ("write_file", {"file_path": "w.txt", "content": "x\n"}),
        ("replace", {"file_path": "a.txt", "old_string": "abc", "new_string": "abd", "instruction": "fix"}),
        ("replace", {"file_path": "a.txt", "old_string": "zzz", "new_string": "q", "instruction": "fix"}),
        ("grep_search", {"pattern": "line"}),
        ("grep_search", {"pattern": "nomatch_xyz"}),
        ("glob", {"pattern": "*.txt"}),
        ("list_directory", {"dir_path": "."}),
    ]
    model.fake.clear()
    model.fake.set(host.protocol, lambda n: calls[n], len(calls))
    scenarios.run_ok(host, "go")
    shown = [json.loads(t)["response"] for t in scenarios.model_saw(model, host)[0]]
    inputs = [json.loads(line) for line in captured.read_text().splitlines()]
    assert len(shown) == len(inputs) == len(calls)
    gemini = HOSTS["gemini"]
    for (tool, _), seen, data in zip(calls, shown, inputs, strict=True):
        ev = gemini.parse(data)
        reported = {"error": ev.error} if ev.error is not None else {"output": ev.result}
        if tool == "run_shell_command":
            seen = {"output": "\n".join(x for x in seen["output"].split("\n") if not x.startswith("Process Group"))}
        assert reported == seen, tool
    assert sum("error" in s for s in shown) == 2  # the missing file, the missing old_string
