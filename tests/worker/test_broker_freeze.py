"""Broker trouble: Tansu frozen (SIGSTOP) for 30 s under load, then resumed (SIGCONT).

The worker must catch up by itself: no verdict lost, repeats only with the
same ``verdict_id``, and the worker process never exits. Uses a broker of
its own, so freezing it does not touch the session's shared one.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from loopwarden.devtools.broker import EmbeddedBroker
from loopwarden.devtools.synthetic import fleet_events
from loopwarden.schemas.config import FleetConfig
from tests.support.live import Names, ThrottledProducer, WorkerProcess, check_against_replay, collect, expected_verdicts

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 6, "criticalThreshold": 12}}}
FREEZE_SECONDS = 30


def test_broker_frozen_under_load_loses_no_verdict(tmp_path):
    config = tmp_path / "loop.json"
    config.write_text(json.dumps(CONFIG))
    events = list(fleet_events(agents=10, runs_per_agent=3, run_length=40, loop_share=0.8, seed=31))
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as broker:
        names = Names("freeze")
        worker = WorkerProcess(broker.bootstrap, names, tmp_path / "data", config=config, log_dir=tmp_path).start()
        try:
            worker.wait_ready()
            producer = ThrottledProducer(broker.bootstrap, names.events, events, chunk=40, pause=0.1).start()
            time.sleep(2.0)  # load flowing
            os.kill(broker.process.pid, signal.SIGSTOP)
            frozen_at = time.monotonic()
            try:
                time.sleep(FREEZE_SECONDS)
                assert worker.alive(), "the worker exited while the broker was frozen"
            finally:
                os.kill(broker.process.pid, signal.SIGCONT)
            thawed_after = time.monotonic() - frozen_at
            positions = producer.join()
            expected = expected_verdicts(events, positions, names.events, FleetConfig.from_document(CONFIG))
            control = collect(
                broker.bootstrap,
                names.control,
                timeout=180,
                idle=3.0,
                until=lambda rs: set(expected) <= {json.loads(r.value)["verdict_id"] for r in rs},
            )
            report = check_against_replay(control, expected)
            assert worker.alive()
            print(f"frozen {thawed_after:.0f}s; {report}")
        finally:
            worker.stop()
