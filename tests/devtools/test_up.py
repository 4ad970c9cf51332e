"""``loopwarden up``: a broker and a worker for your own agent, the README's runner example on it,
Ctrl-C/SIGTERM leave nothing behind, and ``--data-dir`` keeps a run's history across restarts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopwarden.devtools.broker import free_port
from tests.support.live import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = REPO / "deploy" / "config" / "loopwarden.json5"  # the README's: OpenClaw's thresholds, enabled


class Up:
    """``loopwarden up`` as a subprocess on free ports; its children found through /proc."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.broker_port, self.port = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.broker_port}"
        self.out = tmp / f"up-{self.broker_port}.out"
        self.err = tmp / f"up-{self.broker_port}.err"
        cmd = [sys.executable, "-m", "loopwarden.cli", "up", "--broker-port", str(self.broker_port)]
        cmd += ["--port", str(self.port), *args]
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                cmd, cwd=REPO, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(tmp)}
            )

    def text(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def wait_banner(self, timeout: float = 150.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.out.read_text()
            if "Ctrl-C stops" in out:
                return out
            assert self.proc.poll() is None, self.text()
            time.sleep(0.2)
        raise AssertionError(f"no banner within {timeout}s:\n{self.text()}")

    def descendants(self) -> set[int]:
        parents: dict[int, int] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            parents[int(stat.parent.name)] = int(fields[1])
        found, todo = set(), [self.proc.pid]
        while todo:
            pid = todo.pop()
            kids = [p for p, pp in parents.items() if pp == pid]
            found.update(kids)
            todo += kids
        return found

    def stop(self, sig: int = signal.SIGINT, timeout: float = 60.0) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def run_example(bootstrap: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "tests" / "examples" / "runner_example.py")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "LOOPWARDEN_RUNNER_BOOTSTRAP": bootstrap},
    )


def test_up_blocks_the_readme_runner_and_ctrl_c_cleans_up(tmp_path):
    up = Up(tmp_path, "--config", str(CONFIG))
    try:
        banner = up.wait_banner()
        # the line for a runner names the worker's config, so it decides in-process as the README says
        assert f'LoopClient(bootstrap="{up.bootstrap}", config="{CONFIG.resolve()}")' in banner
        assert f"LOOPWARDEN_RUNNER_BOOTSTRAP={up.bootstrap}" in banner
        assert f"LOOPWARDEN_RUNNER_CONFIG={CONFIG.resolve()}" in banner
        children = up.descendants()
        assert len(children) >= 2, children  # Tansu and the worker (and nothing has exited)

        ran = run_example(up.bootstrap)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        lines = ran.stdout.splitlines()
        assert lines[0].startswith("call-11: warn (local) WARNING:"), ran.stdout
        assert lines[1].startswith("call-21: block (local) CRITICAL:"), ran.stdout
        assert (
            "21 tool calls, last decision block" in lines[2] and "fail_open_timeout=0, fail_open_error=0" in lines[2]
        ), ran.stdout
        # printed after the client closed, as the README shows it: 21 calls, 21 results, 2 acks, run_end
        assert "ClientStats(events_sent=45, send_errors=0," in lines[2], ran.stdout

        assert up.stop(signal.SIGINT) == 0, up.text()
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
    assert [pid for pid in children if alive(pid)] == []
    assert "stopping the worker" in up.err.read_text() and "stopped in" in up.err.read_text()
    assert not list(tmp_path.glob("loopwarden-up-*"))  # the temp folder is gone


def test_up_says_detection_is_off_without_a_config_and_sigterm_stops_it(tmp_path):
    up = Up(tmp_path)
    try:
        up.wait_banner()
        children = up.descendants()
        assert "loop detection is off" in up.err.read_text()
        assert up.stop(signal.SIGTERM) == 0, up.text()
    finally:
        if up.proc.poll() is None:
            up.proc.kill()
    assert [pid for pid in children if alive(pid)] == []


def test_up_data_dir_keeps_a_runs_history_across_restarts(tmp_path):
    """Ten identical calls before a restart and eleven after: the 21st is blocked, so the worker
    remembered the run (its state and the broker's records both came back)."""
    import asyncio

    from loopwarden.runner import LoopClient

    async def calls(bootstrap: str, n: int) -> list[str]:
        async with LoopClient(bootstrap=bootstrap) as lw:
            run = lw.run(agent_id="keeper", session_id="s", run_id="r-fixed")
            actions = []
            for i in range(n):
                d = await run.check("read", {"path": "a"}, tool_call_id=f"{n}-{i}", timeout=10.0)
                await run.tool_result(d, result="same" if d.proceed else d.blocked_result())
                actions.append(d.action)
            return actions

    data = tmp_path / "lw"
    first = Up(tmp_path, "--config", str(CONFIG), "--data-dir", str(data))
    try:
        first.wait_banner()
        assert asyncio.run(calls(first.bootstrap, 10)) == ["allow"] * 10
        assert first.stop() == 0, first.text()
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
    assert (data / "broker" / "records.msgpack").is_file()
    # tool data is this user's only: no file or folder of it readable by another local user
    shared = [p for p in [data, *data.rglob("*")] if not p.is_symlink() and p.stat().st_mode & 0o077]
    assert not shared, [(str(p), oct(p.stat().st_mode)) for p in shared]
    second = Up(tmp_path, "--config", str(CONFIG), "--data-dir", str(data))
    try:
        second.wait_banner()
        assert "restored" in second.err.read_text()
        actions = asyncio.run(calls(second.bootstrap, 11))
        assert actions == ["warn"] + ["allow"] * 9 + ["block"], actions  # forgotten: 10 allows, then a warn
        children = second.descendants()
        second.proc.kill()  # no clean stop: no records saved with the state it leaves
        second.proc.wait(30)
        deadline = time.monotonic() + 60  # its worker and broker follow it (parent-death signal)
        while any(alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(alive(pid) for pid in children)
    finally:
        if second.proc.poll() is None:
            second.proc.kill()
    third = Up(tmp_path, "--config", str(CONFIG), "--data-dir", str(data))
    try:
        third.wait_banner()
        # says why: the last stop was unclean and the runs' state is gone
        assert "did not stop cleanly" in third.err.read_text() and "state is gone" in third.err.read_text()
        assert asyncio.run(calls(third.bootstrap, 11)) == ["allow"] * 10 + ["warn"]  # a new start, consistent
        assert third.stop() == 0, third.text()
    finally:
        if third.proc.poll() is None:
            third.proc.kill()
