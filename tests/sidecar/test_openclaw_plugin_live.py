"""The OpenClaw plugin in the real OpenClaw release (npm), turns run offline against a scripted model.

- two OpenClaw agents looping on the same failing tool open one fleet incident on a live
  worker (Tansu, a worker process, the decision service ``loopwarden sidecar`` between the
  plugin and the broker), and a later run of one of them gets the incident's block: the
  plugin's block text is what the model reads as the call's result;
- with the decision service down, the plugin allows every call and OpenClaw's own loop
  detection still runs (its warning reaches the model);
- the plugin's config block is validated by OpenClaw against the plugin's configSchema.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from loopwarden.sidecar.process import SidecarProcess
from tests.hosts.openclaw_host import ScriptedProvider, openclaw, repeat_script, text_of, tool_results, write_config
from tests.support.live import WorkerProcess, collect, ready_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLUGIN = Path(__file__).resolve().parents[2] / "streams" / "sidecar" / "clients" / "openclaw-plugin"
FAILING = ("read", {"path": "missing.txt"})  # fails the same way each time: "File not found: <workspace>/missing.txt"
OPENCLAW_WARNING = "[System note: Tool-loop warning after 10 repeated calls."
# The fleet's config, read by the worker and the decision service alike: OpenClaw's rules, and
# an incident when 2 runs of 2 agents each get the same failure 3 times; then a run that has
# had it 3 times is blocked from calling the tool again.
FLEET_DOC = {
    "tools": {"loopDetection": {"enabled": True}},
    "loopwarden": {
        "incidents": {
            "enabled": True,
            "minStreak": 3,
            "minRuns": 2,
            "minAgents": 2,
            "window": 600,
            "block": True,
            "blockAfter": 3,
            "samples": True,
        }
    },
}
INCIDENT_BLOCK = re.compile(
    r"^CRITICAL: a fleet incident is open: many runs get the same outcome from read; "
    r"this run has had it \d+ times\. Call blocked; try another approach\.$"
)


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
        cfg["agents"]["entries"] = {agent: {"workspace": str(workspace)} for agent in agents}
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


@pytest.fixture(scope="module")
def fleet(tansu, tmp_path_factory) -> Iterator[tuple[WorkerProcess, SidecarProcess]]:
    """A ready worker and the decision service on its topics, both with :data:`FLEET_DOC`."""
    yield from ready_fleet(tansu, tmp_path_factory.mktemp("openclaw-fleet"), "ocfleet", FLEET_DOC)


def loop_until_blocked(calls: int) -> Callable[[list[dict]], object]:
    """The failing call again and again, until ``calls`` results or one that is the fleet's block."""

    def script(messages: list[dict]) -> object:
        results = [text_of(m) for m in tool_results(messages)]
        if len(results) >= calls or (results and INCIDENT_BLOCK.match(results[-1])):
            return "giving up"
        return [FAILING]

    return script


def test_two_openclaw_agents_open_one_incident_and_its_block_reaches_the_model(tansu, fleet, tmp_path):
    worker, sidecar = fleet
    names = worker.names
    with ScriptedProvider(loop_until_blocked(4)) as provider:
        config = openclaw_config(tmp_path, provider.base_url, {"url": sidecar.url}, agents=["alpha", "beta"])
        for agent in ("alpha", "beta"):
            proc = agent_turn(tmp_path, config, agent, f"fleet-{agent}")
            assert proc.returncode == 0, proc.stderr[-3000:]
        # both runs failed the same way four times: the tool ran (nothing blocked yet)
        assert all("File not found" in r for r in seen_results(provider)), seen_results(provider)

    records = [
        json.loads(r.value)
        for r in collect(tansu, names.incidents, until=lambda rs: len(rs) >= 1, idle=2.0, timeout=60)
    ]
    opened = [r for r in records if r["state"] == "open"]
    assert len(opened) == 1, records
    incident = opened[0]
    assert incident["tool_name"] == "read"
    assert sorted(incident["agent_ids"]) == ["alpha", "beta"]
    assert incident["run_count"] == 2 and incident["agent_count"] == 2
    assert "File not found" in incident["sample"]

    # a new run of alpha fails three times more; the worker answers its next call with the incident's block
    with ScriptedProvider(loop_until_blocked(12)) as provider:
        config = openclaw_config(tmp_path, provider.base_url, {"url": sidecar.url}, agents=["alpha", "beta"])
        proc = agent_turn(tmp_path, config, "alpha", "fleet-alpha-2", message="try again")
        assert proc.returncode == 0, proc.stderr[-3000:]
        results = seen_results(provider)
    blocked = [i for i, r in enumerate(results) if INCIDENT_BLOCK.match(r)]
    assert blocked, results
    # the first three calls of the run ran and failed; the block is the model's whole view of the blocked call
    assert blocked[0] >= 3 and all("File not found" in r for r in results[: blocked[0]])
    assert worker.metrics().get('loopwarden_incidents_total{state="open"}') == 1


def test_with_no_url_the_plugin_finds_the_users_own_socket(tmp_path):
    """Issue 44 item 10 and F5: a service started with no address (its user's socket under HOME) and
    the plugin with no ``url`` meet; the plugin checked the socket's folder and owner first, so the
    service's own text is what the model reads for the block."""
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="lw-oc-"))  # a short HOME: a socket's path is at most 107 bytes
    low = Path(__file__).resolve().parents[1] / "data" / "low.config.json5"  # blocks at 3
    env = {"HOME": str(home / "home"), "LOOPWARDEN_RUNNER_BOOTSTRAP": ""}
    (home / "home").mkdir()
    service = SidecarProcess(["--config", str(low)], log_path=tmp_path / "sidecar.log", env=env, as_given=True)
    service.start()
    try:
        assert service.urls == [f"unix:{home}/home/.loopwarden/run/sidecar.sock"]
        with ScriptedProvider(repeat_script([FAILING], 5)) as provider:
            config = openclaw_config(home, provider.base_url, {})
            proc = agent_turn(home, config, "main", "socket-1")
        assert proc.returncode == 0, proc.stderr[-3000:]
        results = seen_results(provider)
        assert "[loopwarden] check" not in proc.stderr, proc.stderr[-3000:]  # nothing failed open
        blocked = [r for r in results if r.startswith("CRITICAL: Called read")]
        assert blocked and "File not found" in results[0], results
    finally:
        service.stop()
        import shutil

        shutil.rmtree(home, ignore_errors=True)


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


# --- the README's configs as printed: loopwarden's blocks reach the model; large outputs are digested ---

README = PLUGIN / "README.md"
BIG_LINES = 1800  # 90 KB of output: over the plugin's 64 KiB; OpenClaw shows the model its first 8 KB
CHANGING = {"command": "cat big.txt; echo p >> poll.txt; wc -l < poll.txt"}  # differs only in its last line
SAME = {"command": "cat big.txt"}
LOOPWARDEN_BLOCK = (
    "CRITICAL: Called exec with identical arguments and identical outcomes 20 times. "
    "Session execution blocked to prevent runaway loops."
)


def documented(name: str) -> dict:
    """A config block of the README as printed (JSON5, the block whose first line is ``// <name>...``)."""
    import pyjson5

    blocks = re.findall(r"```json5\n(.*?)```", README.read_text(), re.S)
    found = [b for b in blocks if b.startswith(f"// {name}")]
    assert len(found) == 1, name
    return pyjson5.loads(found[0])


def documented_openclaw(tmp: Path, base_url: str, service_url: str, own_detection: bool = False) -> Path:
    """The scripted model's config with the README's ``openclaw.json`` over it: its plugin block (this
    checkout's folder, the service's URL, no token file) and its tools (none: OpenClaw's detection off)."""
    doc = documented("openclaw.json")
    entry = doc["plugins"]["entries"]["loopwarden"]["config"]
    entry["url"] = service_url
    del entry["tokenFile"]
    doc["plugins"]["load"]["paths"] = [str(PLUGIN)]
    workspace = tmp / "home" / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "big.txt").write_text(
        "".join(f"{i:05d} a line of build output, the same every time\n" for i in range(BIG_LINES))
    )
    path = write_config(tmp / "openclaw.json", base_url, workspace=workspace)
    cfg = json.loads(path.read_text())
    del cfg["tools"]
    cfg.update(doc)
    if own_detection:
        cfg["tools"] = {"loopDetection": {"enabled": True}}
    path.write_text(json.dumps(cfg, indent=2))
    return path


@pytest.fixture
def documented_service(tmp_path) -> Iterator[SidecarProcess]:
    """``loopwarden sidecar`` standalone with the README's ``loopwarden.json5``."""
    config = tmp_path / "loopwarden.json"
    config.write_text(json.dumps(documented("loopwarden.json5")))
    service = SidecarProcess(["--config", str(config)], log_path=tmp_path / "sidecar.log").start()
    try:
        yield service
    finally:
        service.stop()


def exec_turn(
    tmp: Path, params: dict, rounds: int, service_url: str, own_detection: bool = False
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """One turn calling ``exec`` with ``params`` until ``rounds`` results: the CLI's run, the results the model read."""
    with ScriptedProvider(repeat_script([("exec", params)], rounds)) as provider:
        config = documented_openclaw(tmp, provider.base_url, service_url, own_detection)
        proc = agent_turn(tmp, config, "main", f"big-{rounds}-{own_detection}", timeout=600)
        return proc, seen_results(provider)


def test_documented_config_large_output_changing_at_the_end_is_never_blocked(tmp_path, documented_service):
    proc, results = exec_turn(tmp_path, CHANGING, 30, documented_service.url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(results) == 30
    assert all(r.startswith("00000 a line of build output") for r in results), [r[:200] for r in results]
    assert (tmp_path / "home" / "workspace" / "poll.txt").read_text().count("p") == 30  # every call ran


def test_documented_config_identical_large_output_gets_loopwardens_block(tmp_path, documented_service):
    proc, results = exec_turn(tmp_path, SAME, 22, documented_service.url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(results) == 22
    assert all(r.startswith("00000 a line of build output") for r in results[:20])
    assert results[20] == LOOPWARDEN_BLOCK  # the 21st call: loopwarden's text is the model's whole view
    assert results[21] == LOOPWARDEN_BLOCK  # blocks are sticky


def test_with_openclaws_own_detection_on_the_model_reads_openclaws_block(tmp_path, documented_service):
    """Why the README leaves OpenClaw's detection off: on, OpenClaw blocks the 21st call first, with its own
    text, and its second critical ends the run; loopwarden's text never reaches the model."""
    proc, results = exec_turn(tmp_path, SAME, 22, documented_service.url, own_detection=True)
    assert proc.returncode != 0 and "tool-loop recovery encountered another critical loop" in proc.stderr
    assert all(r.startswith("00000 a line of build output") for r in results[:20])
    assert results[20].startswith("CRITICAL: Called exec with identical outcomes 20 times.")  # OpenClaw's
    assert not any(LOOPWARDEN_BLOCK in r for r in results)
