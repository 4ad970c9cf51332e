"""The fleet side of the coding-agent hooks: two developers' Claude Code sessions, one live worker.

Each developer runs a decision service of their own (``loopwarden sidecar``) connected to
the broker, and Claude Code with ``loopwarden hook`` installed under their own agent id.
Both sessions hit the same failing command; the worker sees both runs join one failure
signature and opens a fleet incident while they run (streams/fleet/FLEET.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hosts import scenarios
from tests.hosts.fake_models import FakeModelServer, repeat
from tests.hosts.harness import ClaudeCode
from tests.support.live import collect, fleet_args, ready_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAILING = "cat no-such-file.txt"
CONFIG = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 20}},
    "loopwarden": {"incidents": {"enabled": True, "minStreak": 3, "minRuns": 2, "minAgents": 2, "window": 600}},
}


@pytest.fixture(scope="module")
def worker(tansu: str, tmp_path_factory: pytest.TempPathFactory):
    yield from ready_worker(tansu, tmp_path_factory.mktemp("hook-fleet"), "hookfleet", CONFIG)


def run_sessions(tansu: str, worker, tmp_path: Path, sessions: list[tuple[str, Path, str]], prompt: str) -> list:
    """Each ``(agent id, project, command)`` is one developer: a decision service of their own on the
    worker's topics, and a Claude Code session that runs ``command`` 4 times. The incidents topic's
    records, read until one incident is open."""
    names = worker.names
    config = tmp_path / "loop.json"
    config.write_text(json.dumps(CONFIG))
    topics = fleet_args(tansu, names)
    services = []
    try:
        with FakeModelServer() as model:
            for dev, project, command in sessions:
                service = scenarios.sidecar(tmp_path / f"{dev}.log", config=config, extra=topics)
                services.append(service)
                host = ClaudeCode(project, model.url)
                scenarios.install_hooks(host, service.url, dev)
                model.fake.set(host.protocol, repeat(*host.shell(command)), 4)
                scenarios.run_ok(host, prompt)
            return collect(
                tansu,
                names.incidents,
                until=lambda rs: any(json.loads(r.value)["state"] == "open" for r in rs),
                timeout=90,
            )
    finally:
        for service in services:
            service.stop()


def test_the_same_failing_command_in_two_developers_sessions_opens_a_fleet_incident(
    tansu: str, worker, tmp_path: Path
) -> None:
    sessions = [(dev, tmp_path / dev, FAILING) for dev in ("dev-alice", "dev-bob")]
    records = run_sessions(tansu, worker, tmp_path, sessions, "read the file")
    opened = [json.loads(r.value) for r in records if json.loads(r.value)["state"] == "open"]
    assert len(opened) == 1, opened
    incident = opened[0]
    text = json.dumps(incident)
    assert "dev-alice" in text and "dev-bob" in text, text
    assert incident["run_count"] == 2


def test_the_same_failure_in_each_developers_own_workspace_opens_one_incident(tansu: str, worker, tmp_path: Path):
    """Each session reads a file missing from its own project by its absolute path, so the bytes of the
    two failures differ (each names its own folder); the failure fingerprint makes them one incident.
    A third session missing another file joins none: its failure is a different one."""
    sessions = []
    for dev, name in (("ws-carol", "labels.csv"), ("ws-alice", "input.csv"), ("ws-bob", "input.csv")):
        project = tmp_path / dev / "work" / dev[3:]
        sessions.append((dev, project, f"cat {project / 'data' / name}"))
    records = run_sessions(tansu, worker, tmp_path, sessions, "read the data")
    ours = [json.loads(r.value) for r in records]
    ours = [r for r in ours if {"ws-alice", "ws-bob", "ws-carol"} & set(r["agent_ids"])]
    assert [r["state"] for r in ours] == ["open"], ours
    (incident,) = ours
    assert sorted(incident["agent_ids"]) == ["ws-alice", "ws-bob"] and incident["run_count"] == 2
    assert incident["fingerprint_kind"] == "normalized-1" and "…/input.csv" in incident["example"], incident
    assert str(tmp_path) not in json.dumps(incident)
