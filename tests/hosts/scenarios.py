"""What every coding-agent host must show with ``loopwarden hook`` installed, host by host.

Each host module (tests/hooks/test_<host>.py) makes its harness, a scripted model and a
running decision service, and calls these. The shell command each scripted call runs
appends a line to ``ran.txt`` in the project, so a test counts the calls that really ran;
what the model read is taken from the last request the model server received.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from loopwarden.sidecar.process import SidecarProcess
from tests.hosts import fake_models
from tests.hosts.fake_models import FakeModelServer, progress, repeat
from tests.hosts.harness import Host, session_of

REPO = Path(__file__).resolve().parents[2]
LOOP_CONFIG = REPO / "deploy" / "config" / "loopwarden.json5"  # OpenClaw's thresholds: warn at 10, block at 20
WARNING = re.compile(r"WARNING: You have called \S+ (\d+) times with identical arguments")
CRITICAL = re.compile(r"CRITICAL: Called \S+ with identical arguments and identical outcomes (\d+) times")
LOOP_COMMAND = "echo x >> ran.txt"

TOOL_RESULTS = {
    "anthropic": fake_models.anthropic_tool_results,
    "gemini": fake_models.gemini_tool_results,
    "openai": fake_models.openai_tool_results,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sidecar(log: Path, config: Path = LOOP_CONFIG, extra: list[str] | None = None) -> SidecarProcess:
    """``loopwarden sidecar`` in a process of its own, on a free loopback port, ready."""
    return SidecarProcess(["--config", str(config), *(extra or [])], log_path=log).start()


def install_hooks(host: Host, url: str | None, agent_id: str | None = None, *flags: str) -> None:
    """``loopwarden hook install HOST --dir PROJECT --url URL``, the command a user runs (no URL: none)."""
    argv = [str(Path(sys.executable).with_name("loopwarden")), "hook", "install", host.name, "--dir", str(host.project)]
    argv += (["--url", url] if url else []) + (["--agent-id", agent_id] if agent_id else []) + list(flags)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert host.hooks_file.exists()


def ran(host: Host) -> int:
    path = host.project / "ran.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


def model_saw(model: FakeModelServer, host: Host) -> tuple[list[str], str]:
    """(each tool result of the last model request as text, the whole request as text)."""
    bodies = [b for b in model.fake.bodies("") if TOOL_RESULTS[host.protocol](b)]
    assert bodies, "the model never received a tool result"
    last = bodies[-1]
    results = [fake_models.result_text(r) for r in TOOL_RESULTS[host.protocol](last)]
    return results, json.dumps(last)


def run_ok(host: Host, prompt: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = host.run(prompt, **kw)
    assert proc.returncode == 0, f"{host.name} exited {proc.returncode}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}"
    return proc


def looping_session_is_warned_at_10_and_blocked_at_20(host: Host, model: FakeModelServer, calls: int = 21) -> None:
    model.fake.clear()
    model.fake.set(host.protocol, repeat(*host.shell(LOOP_COMMAND)), calls)
    run_ok(host, "append to ran.txt")
    results, whole = model_saw(model, host)
    assert len(results) == calls
    blocked = [i for i, text in enumerate(results) if CRITICAL.search(text)]
    # the 21st identical call is the first refused (20 identical calls and outcomes before it), and
    # every later identical call too; the tool ran only for the calls that were let through
    assert blocked == list(range(20, calls)), blocked
    assert CRITICAL.search(results[20]).group(1) == "20"
    assert ran(host) == 20
    warnings = [int(m.group(1)) for m in WARNING.finditer(whole)]
    assert warnings and warnings[0] == 10, whole[-3000:]
    assert not any(WARNING.search(t) or CRITICAL.search(t) for t in results[:10])


def healthy_session_is_never_touched(host: Host, model: FakeModelServer, calls: int = 12) -> None:
    model.fake.clear()
    tool, args = host.shell("echo step {n} >> ran.txt")
    key = next(iter(args))
    model.fake.set(host.protocol, progress(tool, key, "echo step {n} >> ran.txt"), calls)
    run_ok(host, "count")
    results, whole = model_saw(model, host)
    assert len(results) == calls and ran(host) == calls
    assert not WARNING.search(whole) and not CRITICAL.search(whole)


def sessions_never_pool(make_host, model: FakeModelServer, calls: int = 11) -> None:
    """Two sessions of 11 identical calls each: each is warned once (at 10), neither blocked (22 would be)."""
    model.fake.clear()
    first, second = make_host("a"), make_host("b")
    model.fake.set(first.protocol, repeat(*first.shell(LOOP_COMMAND)), calls)
    for host in (first, second):
        run_ok(host, "append to ran.txt")
        results, whole = model_saw(model, host)
        assert len(results) == calls and ran(host) == calls
        assert not CRITICAL.search(whole)
        assert [int(m.group(1)) for m in WARNING.finditer(whole)][:1] == [10]


def prompts_never_pool(host: Host, model: FakeModelServer, calls: int = 11, **resume_kw: Any) -> None:
    """Two prompts of one session, 11 identical calls each: the second prompt starts a new run."""
    model.fake.clear()
    model.fake.set(host.protocol, repeat(*host.shell(LOOP_COMMAND)), calls)
    proc = run_ok(host, "append to ran.txt")
    session = session_of(host, proc)
    assert session
    model.fake.set(
        host.protocol, repeat(*host.shell(LOOP_COMMAND)), 2 * calls
    )  # the script counts the session's results
    run_ok(host, "once more", resume=session, **resume_kw)
    results, whole = model_saw(model, host)
    assert len(results) == 2 * calls and ran(host) == 2 * calls  # nothing refused: 22 in one run would be
    assert not any(CRITICAL.search(t) for t in results)


def service_down_the_agent_runs_unharmed(host: Host, model: FakeModelServer, calls: int = 12) -> None:
    model.fake.clear()
    model.fake.set(host.protocol, repeat(*host.shell(LOOP_COMMAND)), calls)
    proc = run_ok(host, "append to ran.txt")
    results, whole = model_saw(model, host)
    assert len(results) == calls and ran(host) == calls
    assert not WARNING.search(whole) and not CRITICAL.search(whole)
    assert fake_models.FINAL_TEXT in proc.stdout


class HostTests:
    """The tests of one host: ``class TestHost(HostTests): host_class = ...`` in the host's module
    (the module-scoped ``model`` and ``service`` fixtures are in tests/hooks/conftest.py)."""

    host_class: type[Host]

    def host(self, root: Path, model: FakeModelServer, url: str) -> Host:
        host = self.host_class(root, model.url)
        install_hooks(host, url)
        return host

    def test_a_looping_session_is_warned_at_10_and_blocked_at_20(self, tmp_path: Path, model, service) -> None:
        looping_session_is_warned_at_10_and_blocked_at_20(self.host(tmp_path, model, service.url), model)

    def test_a_healthy_session_is_never_touched(self, tmp_path: Path, model, service) -> None:
        healthy_session_is_never_touched(self.host(tmp_path, model, service.url), model)

    def test_two_sessions_never_pool(self, tmp_path: Path, model, service) -> None:
        sessions_never_pool(lambda tag: self.host(tmp_path / tag, model, service.url), model)

    def test_two_prompts_of_one_session_never_pool(self, tmp_path: Path, model, service) -> None:
        prompts_never_pool(self.host(tmp_path, model, service.url), model)

    def test_the_service_down_the_agent_runs_unharmed(self, tmp_path: Path, model) -> None:
        host = self.host(tmp_path, model, f"http://127.0.0.1:{free_port()}")
        service_down_the_agent_runs_unharmed(host, model)
