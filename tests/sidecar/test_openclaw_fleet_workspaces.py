"""OpenClaw agents in their own workspaces share one fleet incident (the failure fingerprint).

The real OpenClaw release (npm) with the loopwarden plugin, turns run offline against a scripted
model, the decision service between the plugin and the broker, a live worker. OpenClaw's ``read``
error names the absolute path of the agent's workspace ("File not found: <workspace>/missing.txt"),
so two agents with workspaces of their own never print the same bytes: grouped by the exact outcome
hash they never met (streams/fleet/FLEET.md). The plugin and its harness are used as they are.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopwarden.sidecar.process import SidecarProcess
from tests.hosts.openclaw_host import ScriptedProvider, repeat_script, write_config
from tests.sidecar.test_openclaw_plugin_live import FAILING, agent_turn, plugin_block, seen_results
from tests.support.live import WorkerProcess, collect, ready_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOC = {
    "tools": {"loopDetection": {"enabled": True}},
    "loopwarden": {"incidents": {"enabled": True, "minStreak": 3, "minRuns": 2, "minAgents": 2, "window": 600}},
}


@pytest.fixture(scope="module")
def fleet(tansu, tmp_path_factory) -> Iterator[tuple[WorkerProcess, SidecarProcess]]:
    yield from ready_fleet(tansu, tmp_path_factory.mktemp("openclaw-workspaces"), "ocws", DOC)


def own_workspaces_config(tmp: Path, base_url: str, service_url: str, agents: dict[str, Path]) -> Path:
    """OpenClaw's config with each agent in the workspace given (the scripted model, the plugin)."""
    default = tmp / "home" / "workspace"
    default.mkdir(parents=True, exist_ok=True)
    path = write_config(tmp / "openclaw.json", base_url, workspace=default, extra=plugin_block({"url": service_url}))
    cfg = json.loads(path.read_text())
    cfg["agents"]["ownership"] = "explicit"
    cfg["agents"]["entries"] = {agent: {"workspace": str(ws)} for agent, ws in agents.items()}
    path.write_text(json.dumps(cfg, indent=2))
    return path


def test_two_openclaw_agents_in_their_own_workspaces_open_one_incident(tansu, fleet, tmp_path):
    worker, sidecar = fleet
    workspaces = {"gamma": tmp_path / "srv" / "gamma" / "ws", "delta": tmp_path / "home" / "delta" / "projects" / "x"}
    for ws in workspaces.values():
        ws.mkdir(parents=True)
    with ScriptedProvider(repeat_script([FAILING], 4)) as provider:
        config = own_workspaces_config(tmp_path, provider.base_url, sidecar.url, workspaces)
        seen = {}
        for agent in workspaces:
            proc = agent_turn(tmp_path, config, agent, f"ws-{agent}")
            assert proc.returncode == 0, proc.stderr[-3000:]
            seen[agent] = seen_results(provider)
    # each agent's failure names its own workspace: the bytes differ
    for agent, ws in workspaces.items():
        assert seen[agent] and all(str(ws) in r for r in seen[agent][-4:]), seen[agent]

    records = [
        json.loads(r.value)
        for r in collect(tansu, worker.names.incidents, until=lambda rs: len(rs) >= 1, idle=2.0, timeout=60)
    ]
    assert [r["state"] for r in records] == ["open"], records
    incident = records[0]
    assert incident["tool_name"] == "read" and sorted(incident["agent_ids"]) == ["delta", "gamma"]
    assert incident["fingerprint_kind"] == "normalized-1" and "…/missing.txt" in incident["example"], incident
    assert str(tmp_path) not in json.dumps(incident)
