"""A local stack: the embedded Tansu broker and one worker, started and stopped together.

What ``loopwarden dev`` (the demo) and ``loopwarden up`` (your own agents)
share: start the broker (or use a given Kafka), start a worker on it, wait
until it is ready, and stop both, worker first, whatever ended the command:
Ctrl-C, SIGTERM, a closed terminal (SIGHUP) or an error.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import Any

from loopwarden.devtools.broker import EmbeddedBroker
from loopwarden.devtools.processes import WorkerProcess


def require(*modules: str) -> None:
    """Import ``modules`` now, so a core install fails before starting anything, with
    ModuleNotFoundError naming the first missing one (the command line turns it into the extra)."""
    import importlib

    for module in modules:
        importlib.import_module(module)


class Hangup(Exception):
    """SIGHUP/SIGTERM (closed terminal, kill): stop like Ctrl-C, so everything is cleaned up."""


def _raise_hangup(signum: int, _frame: Any) -> None:
    raise Hangup(signum)


STOP_SIGNALS = (signal.SIGHUP, signal.SIGTERM)


def raise_on_stop_signals() -> None:
    """From now on SIGHUP and SIGTERM raise :class:`Hangup` and SIGINT KeyboardInterrupt (also when
    started in the background of a shell, which leaves SIGINT ignored)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _raise_hangup)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def ignore_stop_signals() -> None:
    """Called first thing in a clean-up, so that a second signal does not interrupt it."""
    for sig in (*STOP_SIGNALS, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)


def port_in_use(host: str, port: int) -> bool:
    """Whether ``host:port`` cannot be bound now (another broker or worker holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


class LocalStack:
    """The embedded broker (unless ``broker_url`` names a Kafka) and one worker process.

    Files: ``work_dir/tansu.log``, the worker's log (``worker.log_path``) in ``work_dir``,
    its RocksDB state in ``state_dir`` (default ``work_dir/data``).
    """

    def __init__(
        self,
        work_dir: Path,
        *,
        broker_url: str | None = None,
        broker_port: int | None = None,
        worker_port: int = 0,
        config: str | Path | None = None,
        extra: list[str] | tuple[str, ...] = (),
        log_level: str | None = None,
        state_dir: Path | None = None,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.broker_url = broker_url
        self.broker_port = broker_port
        self.worker_port = worker_port
        self.config = config
        self.extra = list(extra)
        self.log_level = log_level
        self.state_dir = state_dir or self.work_dir / "data"
        self.broker: EmbeddedBroker | None = None
        self.worker: WorkerProcess | None = None
        self.url = broker_url or ""

    @property
    def bootstrap(self) -> str:
        from loopwarden.kafka.connection import servers

        return ",".join(servers(self.url))

    def start_broker(self) -> str:
        """Start the embedded broker (if no Kafka was given); its ``kafka://`` URL."""
        if self.broker_url is None:
            self.broker = EmbeddedBroker(port=self.broker_port, log_path=self.work_dir / "tansu.log").start()
            self.url = self.broker.url
        return self.url

    def start_worker(self) -> WorkerProcess:
        self.worker = WorkerProcess(
            self.url,
            self.state_dir,
            config=self.config,
            extra=self.extra,
            log_dir=self.work_dir,
            log_level=self.log_level,
            port=self.worker_port,
        )
        return self.worker.start()

    def start(self) -> LocalStack:
        self.start_broker()
        self.start_worker()
        return self

    def stop(self) -> int | None:
        """Stop the worker (SIGTERM, it flushes its state), then the broker; the worker's exit code."""
        code = None
        if self.worker is not None:
            code = self.worker.stop()
        if self.broker is not None:
            self.broker.stop()
        return code
