"""A ``loopwarden worker`` in a subprocess: what the demo, the benchmarks and the tests share.

One place starts a worker (with the parent-death guard, so a killed demo or
test run leaves no worker behind), waits for ``/readyz``, reads
``/metrics`` (parsed with prometheus_client's own text parser) and stops it.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from loopwarden.devtools.broker import die_with_parent, free_port

# Short group timings: Tansu holds a group join for half the session timeout.
FAST_GROUP = ("--session-timeout", "6", "--heartbeat-interval", "1", "--commit-interval", "0.5")


class TopicNames:
    """The topics and app id of one worker group (tests and benches isolate themselves by these)."""

    def __init__(self, tag: str, app_id: str | None = None) -> None:
        self.app_id = app_id or f"lw-{tag}"
        self.events = f"events-{tag}"
        self.control = f"control-{tag}"
        self.shadow = f"shadow-{tag}"
        self.config = f"config-{tag}"
        self.dead_letter = f"dead-{tag}"
        self.incidents = f"incidents-{tag}"

    def args(self) -> list[str]:
        return [
            "--app-id",
            self.app_id,
            "--events-topic",
            self.events,
            "--control-topic",
            self.control,
            "--shadow-topic",
            self.shadow,
            "--config-topic",
            self.config,
            "--dead-letter-topic",
            self.dead_letter,
            "--incidents-topic",
            self.incidents,
        ]


def parse_metrics(text: str) -> dict[str, float]:
    """Samples as ``{'name{labels}': value}`` plus, per labelled name, the sum as ``{'name': total}``."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels:
                labels = ",".join(f'{k}="{v}"' for k, v in sample.labels.items())
                out[f"{sample.name}{{{labels}}}"] = sample.value
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
            else:
                out[sample.name] = sample.value
    return out


class WorkerProcess:
    """``loopwarden worker`` as a child process: start, wait ready, scrape, SIGKILL, restart."""

    def __init__(
        self,
        broker_url: str,
        data_dir: Path,
        *,
        names: TopicNames | None = None,
        config: Path | str | None = None,
        extra: list[str] | tuple[str, ...] = (),
        log_dir: Path | None = None,
        log_level: str | None = None,
        cwd: Path | None = None,
        port: int = 0,
    ) -> None:
        self.broker_url = broker_url if "://" in broker_url else f"kafka://{broker_url}"
        self.data_dir = Path(data_dir)
        self.names = names
        self.config = config
        self.extra = list(extra)
        self.log_dir = log_dir or self.data_dir.parent
        self.log_level = log_level
        self.cwd = cwd
        self.fixed_port = port  # 0: a free port at every start
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.log_path: Path | None = None

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "loopwarden.cli",
            "worker",
            "--broker",
            self.broker_url,
            "--data-dir",
            str(self.data_dir),
            "--port",
            str(self.port),
            "--host",
            "127.0.0.1",
            *FAST_GROUP,
        ]
        if self.log_level is not None:  # None: the worker's default
            cmd += ["--log-level", self.log_level]
        if self.names is not None:
            cmd += self.names.args()
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        return cmd + self.extra

    def start(self) -> WorkerProcess:
        self.port = self.fixed_port or free_port()
        self.starts += 1
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_dir / f"worker-{self.data_dir.name}-{self.starts}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def wait_ready(self, timeout: float = 90.0) -> dict:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.proc.returncode if self.proc is not None else None
                raise RuntimeError(f"worker exited with {code}; log: {self.log_path}")
            try:
                status, body = self.get("/readyz")
                last = body
                if status == 200:
                    return json.loads(body)
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"worker not ready after {timeout}s: {last!r}; log: {self.log_path}")

    def metrics(self) -> dict[str, float]:
        """The worker's ``/metrics``, parsed (see :func:`parse_metrics`); empty while it does not answer."""
        try:
            _status, body = self.get("/metrics")
        except OSError:
            return {}
        return parse_metrics(body.decode())

    def wait_metric(self, name: str, at_least: float, timeout: float = 60.0) -> float:
        deadline = time.monotonic() + timeout
        value = 0.0
        while time.monotonic() < deadline:
            value = self.metrics().get(name, 0.0)
            if value >= at_least:
                return value
            time.sleep(0.1)
        raise AssertionError(f"{name} stayed at {value} < {at_least} for {timeout}s")

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def wipe(self) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)
