"""The OpenClaw plugin in the real OpenClaw release (npm), turns run offline against a scripted model.

- with the decision service down, the plugin allows every call and OpenClaw's own loop
  detection still runs (its warning reaches the model);
- the plugin's config block is validated by OpenClaw against the plugin's configSchema.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hosts.openclaw_host import ScriptedProvider, openclaw, repeat_script, text_of, tool_results, write_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLUGIN = Path(__file__).resolve().parents[2] / "streams" / "runner" / "integrations" / "openclaw-plugin"
FAILING = ("read", {"path": "missing.txt"})  # fails the same way each time: "File not found: <workspace>/missing.txt"
OPENCLAW_WARNING = "[System note: Tool-loop warning after 10 repeated calls."


def plugin_block(config: dict) -> dict:
    """OpenClaw's ``plugins`` block loading the plugin from the repo with ``config``."""
    return {
        "plugins": {
            "allow": ["loopwarden"],
            "load": {"paths": [str(PLUGIN)]},
            "entries": {"loopwarden": {"enabled": True, "config": config}},
        }
    }


def openclaw_config(tmp: Path, base_url: str, plugin_config: dict, agents: list[str] = ()) -> Path:
    """A config: the scripted model, OpenClaw's loop detection on, the plugin, the agents (besides ``main``)."""
    workspace = tmp / "home" / "workspace"  # one workspace: the agents' failures read alike
    workspace.mkdir(parents=True, exist_ok=True)
    path = write_config(tmp / "openclaw.json", base_url, workspace=workspace, extra=plugin_block(plugin_config))
    if agents:
        cfg = json.loads(path.read_text())
        cfg["agents"]["ownership"] = "explicit"
        cfg["agents"]["entries"] = {agent: {} for agent in agents}
        path.write_text(json.dumps(cfg, indent=2))
    return path


def agent_turn(tmp: Path, config: Path, agent: str, session: str, message: str = "go", timeout: float = 240):
    return openclaw(
        ["agent", "--local", "--agent", agent, "--session-id", session, "--message", message, "--json"],
        tmp / "home",
        config,
        timeout=timeout,
    )


def seen_results(provider: ScriptedProvider) -> list[str]:
    """The tool results in the model's last request (each request carries the run's whole history)."""
    last = provider.tool_turns()[-1]
    return [text_of(m) for m in tool_results(last["messages"])]


def test_service_down_the_plugin_allows_and_openclaws_own_rules_run(tmp_path):
    with ScriptedProvider(repeat_script([FAILING], 11)) as provider:
        # nothing listens on port 9 (discard): every check is refused at once
        config = openclaw_config(tmp_path, provider.base_url, {"url": "http://127.0.0.1:9"})
        proc = agent_turn(tmp_path, config, "main", "down-1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = seen_results(provider)
    assert len(results) == 11
    # every call ran (the plugin allowed it): each result is the tool's own error
    assert all("File not found" in r for r in results), results
    # OpenClaw's own loop detection ran: its warning on the 10th identical call
    assert any(OPENCLAW_WARNING in r for r in results), results
    # the plugin said so once (the later failures within 30 s are counted, not logged)
    failures = [line for line in proc.stderr.splitlines() if "[loopwarden] check failed" in line]
    assert len(failures) == 1, proc.stderr[-3000:]
    assert "allowing (fail open" in failures[0]


def test_openclaw_validates_the_plugin_config_against_its_schema(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    good = openclaw_config(tmp_path, "http://127.0.0.1:9/v1", {"url": "http://127.0.0.1:7766", "timeoutMs": 250})
    assert openclaw(["config", "validate"], home, good, timeout=120).returncode == 0
    bad = openclaw_config(tmp_path, "http://127.0.0.1:9/v1", {"url": "http://127.0.0.1:7766", "timeout": 250})
    proc = openclaw(["config", "validate"], home, bad, timeout=120)
    assert proc.returncode != 0
    assert 'plugins.entries.loopwarden.config: invalid config: must not have additional properties: "timeout"' in (
        proc.stdout + proc.stderr
    )
