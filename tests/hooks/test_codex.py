"""Codex CLI with ``loopwarden hook`` installed, against a scripted model and a live decision service.

The real CLI (pinned in tests/hosts/install.py) runs headless; its hooks run the real hook
command, which asks a ``loopwarden sidecar`` process (OpenClaw's thresholds, no broker: it
decides locally). What the model received is read from the model server (tests/hosts/scenarios.py).
"""

from __future__ import annotations

import pytest

from tests.hosts import scenarios
from tests.hosts.harness import CodexCli
from tests.hosts.install import MCP_FILESYSTEM
from tests.hosts.tool_rows import CAPTURE, Row, RowHosts, changing_file, fixed_file, row_hosts, run_mcp_rows, run_row

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class TestCodexCli(scenarios.HostTests):
    host_class = CodexCli


def test_a_compaction_arms_the_guard_and_the_aborted_run_runs_no_more_calls(tmp_path, model, service, monkeypatch):
    """Codex compacts its context when the model reports it full (``model_auto_compact_token_limit``):
    it asks the model for a checkpoint summary and fires PreCompact, which reports /v1/compaction. The
    same call's identical outcomes after it abort the run (compaction_loop_persisted): every later
    call is denied with the abort's text, and the tool runs no more."""
    import json

    from tests.hosts import fake_models

    plain = fake_models.openai_answer
    compacted: list[int] = []

    def answer(body, behaviour):
        items = body.get("input") if isinstance(body.get("input"), list) else []
        if items and "CONTEXT CHECKPOINT COMPACTION" in json.dumps(items[-1]):
            return plain({}, None)  # the summary: a plain message
        kind, out = plain(body, behaviour)
        if len(fake_models.openai_tool_results(body)) == 6 and not compacted:  # once: the context is full
            compacted.append(1)
            out = out.replace(b'"input_tokens": 10', b'"input_tokens": 90000')
            out = out.replace(b'"total_tokens": 15', b'"total_tokens": 90005')
        return kind, out

    monkeypatch.setattr(fake_models, "openai_answer", answer)
    host = CodexCli(tmp_path, model.url)
    config = host.codex_home / "config.toml"
    config.write_text("model_auto_compact_token_limit = 50000\nmodel_context_window = 100000\n" + config.read_text())
    scenarios.install_hooks(host, service.url)
    model.fake.clear()
    model.fake.set("openai", fake_models.repeat(*host.shell("echo same >> ran.txt")), 16)
    scenarios.run_ok(host, "append to ran.txt")
    bodies = model.fake.bodies("")
    assert sum("CONTEXT CHECKPOINT COMPACTION" in json.dumps(b) for b in bodies) == 1
    ran = scenarios.ran(host)
    assert 6 < ran < 16  # it ran past the compaction, then the abort stopped the tool
    results, _ = scenarios.model_saw(model, host)
    refused = [t for t in results if "blocked by PreToolUse hook" in t]
    assert refused and all("compaction" in t.lower() for t in refused), refused[:2]


# --- each tool, identical calls (issue 42): changing outputs are never refused; identical ones are ----
# Rows run at low thresholds (warn at 3, refuse after 6 identical outcomes: the 7th call, index 6)
# unless they say "default" (OpenClaw's 10/20: the 21st call, index 20).

PATCH_MISSING = "*** Begin Patch\n*** Update File: missing.txt\n@@\n-old\n+new\n*** End Patch\n"
PATCH_A = "*** Begin Patch\n*** Update File: a.txt\n@@\n-old\n+new\n*** End Patch\n"


def _shell_patch(patch: str) -> dict:
    return {"cmd": f"apply_patch <<'EOF'\n{patch}EOF\n"}


def _exit_alternates(project, n):  # same output every time, exit code 0, 1, 0, 1, ...
    (project / "flag").unlink(missing_ok=True) if n % 2 == 0 else (project / "flag").write_text("")


SHELL_ROWS = [
    Row("shell, output grows (default)", "exec_command", {"cmd": "echo p >> poll.txt; wc -l poll.txt"}, 30, None),
    Row("shell, same output", "exec_command", {"cmd": "echo same"}, 8, 6),
    Row("shell, same failure", "exec_command", {"cmd": "cat missing.txt"}, 8, 6),
    Row(
        "shell, 80 KB changing in its last line",
        "exec_command",
        {"cmd": "cat big.txt"},
        30,
        None,
        world=changing_file("big.txt", large=True),
    ),
    Row(
        "shell, same output, exit code alternates",
        "exec_command",
        {"cmd": "echo same; test ! -e flag"},
        30,
        None,
        world=_exit_alternates,
    ),
    Row("apply_patch via shell, same failure (default)", "exec_command", _shell_patch(PATCH_MISSING), 22, 20),
    Row("apply_patch via shell, same failure", "exec_command", _shell_patch(PATCH_MISSING), 8, 6),
    Row(
        "apply_patch via shell, same success",
        "exec_command",
        _shell_patch(PATCH_A),
        8,
        6,
        world=fixed_file("a.txt", "old\n"),
    ),
]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, model, low_service, service) -> RowHosts:
    return row_hosts(CodexCli, tmp_path_factory, model, low_service, service)


@pytest.mark.parametrize("row", SHELL_ROWS, ids=lambda r: r.name)
def test_shell_and_apply_patch_through_it(row, hosts, model):
    host = hosts.for_row(row)
    run_row(host, model, row)


def test_the_freeform_apply_patch_tool_failing_the_same_way_is_refused(tmp_path, model, low_service):
    """A model whose catalog entry offers apply_patch as a freeform tool (gpt-5.5): a failed patch fires
    PreToolUse and no PostToolUse; its outcome is read back from the transcript at the next hook.
    A successful one fires PostToolUse, and the same patch applied again and again is refused too."""
    host = CodexCli(tmp_path, model.url)
    config = host.codex_home / "config.toml"
    config.write_text(config.read_text().replace('model = "fake-model"', 'model = "gpt-5.5"'))
    scenarios.install_hooks(host, low_service.url)
    run_row(host, model, Row("apply_patch, same failure", "apply_patch", PATCH_MISSING, 8, 6))
    run_row(
        host, model, Row("apply_patch, same success", "apply_patch", PATCH_A, 8, 6, world=fixed_file("a.txt", "old\n"))
    )
    tools = [t.get("name") for t in model.fake.bodies("/responses")[0].get("tools", [])]
    assert "apply_patch" in tools


def test_an_mcp_tool(tmp_path, model, low_service):
    """The filesystem MCP server's read_text_file: a file that grows between identical reads is never
    refused; the same text, or the same failure (no PostToolUse: read back), is."""
    from tests.hosts.install import bin_path

    host = CodexCli(tmp_path, model.url)
    server = bin_path(MCP_FILESYSTEM, "mcp-server-filesystem")
    config = host.codex_home / "config.toml"
    config.write_text(config.read_text() + f'[mcp_servers.fs]\ncommand = "{server}"\nargs = ["{host.project}"]\n')
    scenarios.install_hooks(host, low_service.url)
    read = "mcp__fs/read_text_file"
    run_mcp_rows(host, model, read)


def test_the_outcome_hashed_is_what_the_model_read(tmp_path, model):
    """The mapping, checked against the real CLI. The transcript the hook reads back from holds, for
    every call, exactly the output the model received; a PostToolUse outcome (Codex.parse of the
    real input) is that output without Codex's volatile header lines (and, for the shell, its token
    count, a function of the output); an MCP outcome is the structuredContent the model read."""
    import json
    import sys

    from loopwarden.hooks import transcript
    from loopwarden.hooks.hosts import HOSTS, codex_shown
    from tests.hosts.install import bin_path

    host = CodexCli(tmp_path, model.url)
    server = bin_path(MCP_FILESYSTEM, "mcp-server-filesystem")
    config = host.codex_home / "config.toml"
    config.write_text(config.read_text() + f'[mcp_servers.fs]\ncommand = "{server}"\nargs = ["{host.project}"]\n')
    script, captured = tmp_path / "capture.py", tmp_path / "hooks.jsonl"
    script.write_text(CAPTURE)
    entry = [
        {"matcher": "*", "hooks": [{"type": "command", "command": f"CAPTURE={captured} {sys.executable} {script}"}]}
    ]
    host.write_hooks({"hooks": {"PreToolUse": entry, "PostToolUse": entry}})
    (host.project / "a.txt").write_text("old\n")
    calls = [
        ("exec_command", {"cmd": "echo out; echo err >&2"}),
        ("exec_command", {"cmd": "echo out; exit 3"}),
        ("exec_command", _shell_patch(PATCH_MISSING)),
        ("exec_command", _shell_patch(PATCH_A)),
        ("mcp__fs/read_text_file", {"path": "a.txt"}),
        ("mcp__fs/read_text_file", {"path": "missing.txt"}),
    ]
    model.fake.clear()
    model.fake.set(host.protocol, lambda n: calls[n], len(calls))
    scenarios.run_ok(host, "go")
    last = model.fake.bodies("/responses")[-1]
    shown = {i["call_id"]: i["output"] for i in last["input"] if i.get("type") == "function_call_output"}
    assert len(shown) == len(calls)
    hooks = [json.loads(line) for line in captured.read_text().splitlines()]
    posts = {h["tool_use_id"]: h for h in hooks if h["hook_event_name"] == "PostToolUse"}
    path = hooks[0]["transcript_path"]
    in_transcript = {}
    for line in transcript.lines_backwards(path):
        item = transcript._item(line)
        if item is not None and item.get("type") == "function_call_output":
            in_transcript[item["call_id"]] = item["output"]
    assert in_transcript == shown  # the read-back source is what the model received
    codex = HOSTS["codex"]
    for call_id, data in posts.items():
        result = codex.parse(data).result
        seen = codex_shown(shown[call_id])
        if data["tool_name"] == "Bash":
            seen = "\n".join(x for x in seen.split("\n") if not x.startswith("Original token count: "))
            assert result == seen
        else:  # the MCP success: Codex shows the structuredContent JSON after its header
            assert json.loads(result) == json.loads(seen.split("Output:\n", 1)[1])
    # no PostToolUse: both patches through the shell and the failed MCP call (read back instead)
    assert sorted(posts) == ["call_fake_0000", "call_fake_0001", "call_fake_0004"]
