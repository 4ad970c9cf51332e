"""``loopwarden bench adapters`` pieces that need no broker (no timing is asserted)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from loopwarden.bench import adapters
from loopwarden.runner import LoopClient


def test_a_framework_that_is_not_installed_is_skipped(monkeypatch):
    monkeypatch.setitem(sys.modules, "loopwarden.runner.integrations.pydantic_ai", None)  # import fails
    why = adapters._missing("pydantic_ai")
    assert why is not None and "loopwarden[pydantic-ai]" in why
    assert adapters._missing("client") is None
    report = asyncio.run(adapters.bench(["pydantic_ai"], [10.0], 0.1))
    assert report["frameworks"] == {"pydantic_ai": {"skipped": why}}
    assert "skipped" in adapters.table(report)


@pytest.mark.parametrize("mode", adapters.MODES)
@pytest.mark.parametrize("framework", adapters.FRAMEWORKS)
def test_each_harness_gates_its_call_through_the_adapter(framework, mode):
    if adapters._missing(framework):
        pytest.skip(adapters._missing(framework))

    async def go() -> tuple[LoopClient, list]:
        # not started: worker-mode checks fail open (counted); local ones are decided in-process
        client = LoopClient(bootstrap="kafka://127.0.0.1:1", **adapters._options(mode))
        assert client.local == (mode == "local")
        harness = adapters.HARNESSES[framework](client)
        rotation = adapters._Rotation(harness)
        samples: list = []
        for _ in range(adapters.RUN_LENGTH + 1):  # one run ends on the way
            n, run_id = rotation.next()
            await adapters._one(harness, n, run_id, samples)
        await asyncio.gather(*rotation.ending)
        return client, samples

    client, samples = asyncio.run(go())
    assert client.stats.checks == adapters.RUN_LENGTH + 1  # one gate check per gated call, none for bare
    assert len(samples) == adapters.RUN_LENGTH + 1 and all(b >= 0 and g >= 0 for b, g in samples)


def test_summary_subtracts_the_bare_call_per_call():
    samples = [(0.001, 0.011), (0.002, 0.032), (0.001, 0.021)]
    s = adapters._summary(samples, 10.0, 0)
    assert s["calls"] == 3 and s["added_p50_ms"] == pytest.approx(20.0)
    assert s["adapter_p50_ms"] == pytest.approx(21.0) and s["bare_p50_ms"] == pytest.approx(1.0)
