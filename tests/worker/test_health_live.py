"""Health that tells the truth, on a real worker: a crashed Faust service is reported and the worker exits.

For each of the fetcher, the consumer and the producer: the service is
crashed inside a running worker (tests/support/drivers/crashing_worker.py),
``/healthz`` answers 503 naming it, and the process exits non-zero: Faust's
own shutdown exits 1 where it notices the crash, and where it does not, the
watchdog exits 70 once the worker has been unhealthy for ``--unhealthy-exit-after``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from loopwarden.devtools.processes import WorkerProcess
from loopwarden.worker.health import EXIT_UNHEALTHY
from tests.support.live import Names

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DRIVER = Path(__file__).resolve().parents[1] / "support" / "drivers" / "crashing_worker.py"


class CrashingWorker(WorkerProcess):
    def __init__(self, service: str, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.service = service

    def command(self) -> list[str]:
        flags = super().command()[4:]  # drop: python -m loopwarden.cli worker
        return [sys.executable, str(DRIVER), self.service, "3", "--", *flags]


@pytest.mark.parametrize("service", ["fetcher", "consumer", "producer"])
def test_crashed_service_gives_503_then_a_nonzero_exit(tansu, tmp_path, service):
    worker = CrashingWorker(
        service,
        tansu,
        tmp_path / "data",
        names=Names(f"crash{service}"),
        log_dir=tmp_path,
        extra=["--unhealthy-exit-after", "6"],
    ).start()
    try:
        worker.wait_ready()
        deadline = time.monotonic() + 30
        body = None
        while time.monotonic() < deadline:
            try:
                status, raw = worker.get("/healthz", timeout=2)
            except OSError:
                status, raw = None, b""
            if status == 503:
                body = json.loads(raw)
                break
            if not worker.alive():
                break
            time.sleep(0.05)
        if body is not None:
            assert body["ok"] is False and any(service in r and "forced" in r for r in body["reasons"]), body
        else:  # Faust shut down at once, before a probe could see it: that is a non-zero exit too
            assert not worker.alive() and f"forced {service} crash" in worker.log_path.read_text()
        code = worker.proc.wait(40)
        print(f"{service}: exit {code}, 503 seen: {body is not None}")
        assert code in (1, EXIT_UNHEALTHY), code
    finally:
        worker.stop()
