"""The worker freezes what it built at start before it runs, so full collections skip it."""

from __future__ import annotations

import gc

from loopwarden.worker import command
from loopwarden.worker.settings import from_sources


def test_run_worker_freezes_startup_objects_before_the_worker_runs(monkeypatch):
    import loopwarden.kafka.admin
    import loopwarden.worker.app

    seen: dict[str, int] = {}

    class FakeWorker:
        def __init__(self, **_kw):
            pass

        def execute_from_commandline(self):
            seen["frozen"] = gc.get_freeze_count()
            raise SystemExit(0)

    class FakeApp:
        Worker = FakeWorker

    async def no_topics(_settings):
        return []

    monkeypatch.setattr(loopwarden.kafka.admin, "ensure_topics", no_topics)
    monkeypatch.setattr(loopwarden.worker.app, "create_app", lambda settings, fleet: (FakeApp(), None))
    gc.unfreeze()
    try:
        assert command.run_worker(from_sources({}, environ={})) == 0
    finally:
        gc.unfreeze()
    assert seen["frozen"] > 0
