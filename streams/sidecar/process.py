"""``loopwarden sidecar`` as a child process: started, its URL read from its first line, stopped.

For the benchmark and the tests (and anyone who supervises the service from
Python): the service prints ``loopwarden sidecar: listening on URL...`` once
it serves.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

_LISTENING = re.compile(r"listening on (\S+)")


def _listeners(args: list[str], as_given: bool) -> list[str]:
    """TCP on a free port unless ``args`` say otherwise, and no Unix socket unless they name one: a child
    never takes the user's default socket (``--socket`` with that path does). ``as_given``: none added."""
    if as_given:
        return []
    out = [] if "--no-tcp" in args or any(a.startswith("--port") for a in args) else ["--port", "0"]
    if not any(a.startswith(("--socket", "--no-socket")) for a in args):
        out.append("--no-socket")
    return out


class SidecarProcess:
    """``SidecarProcess(["--config", path, "--bootstrap", b]).start()``; ``.url`` (TCP on a free port unless
    the args say otherwise; a Unix socket only with ``--socket``), ``.stop()``."""

    def __init__(
        self, args: list[str], log_path: Path | None = None, env: dict[str, str] | None = None, as_given: bool = False
    ) -> None:
        self.args = args
        self.as_given = as_given  # the args alone: the service's own defaults (its socket under $HOME)
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.urls: list[str] = []

    def start(self, timeout: float = 60.0) -> SidecarProcess:
        stderr = open(self.log_path, "ab") if self.log_path is not None else subprocess.DEVNULL  # noqa: SIM115
        cmd = [sys.executable, "-m", "loopwarden.cli", "sidecar", *_listeners(self.args, self.as_given), *self.args]
        env = {**os.environ, **(self.env or {})}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, env=env)
        if stderr is not subprocess.DEVNULL:
            stderr.close()
        line = self._first_line(timeout)
        match = _LISTENING.search(line)
        if match is None:
            self.stop()
            raise RuntimeError(f"loopwarden sidecar did not start: {line!r} (log: {self.log_path})")
        self.urls = line[match.start(1) :].split(" (")[0].split()
        self.url = self.urls[0]
        return self

    def _first_line(self, timeout: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        out: list[bytes] = []
        reader = threading.Thread(target=lambda: out.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        return out[0].decode(errors="replace") if out else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (the service flushes its events), then SIGKILL after ``timeout``; the exit code."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        return proc.returncode
