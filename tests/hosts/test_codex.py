"""Codex CLI with ``loopwarden hook`` installed, against a scripted model and a live decision service.

The real CLI (pinned in tests/hosts/install.py) runs headless; its hooks run the real hook
command, which asks a ``loopwarden sidecar`` process (OpenClaw's thresholds, no broker: it
decides locally). What the model received is read from the model server (tests/hosts/scenarios.py).
"""

from __future__ import annotations

import pytest

from tests.hosts import scenarios
from tests.hosts.harness import CodexCli

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
