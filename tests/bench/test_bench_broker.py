"""``loopwarden bench broker`` measures a real broker: idle consumers cost it CPU, records make the hop."""

from __future__ import annotations

import pytest

from loopwarden.bench.broker import measure

pytestmark = pytest.mark.integration


def test_idle_consumers_cost_the_broker_cpu_and_every_record_is_timed():
    rows = measure(waits=[10], counts=[3], partitions=2, seconds=1.0, records=12)["rows"]
    (row,) = rows
    assert (row["fetch_wait_ms"], row["consumers"], row["partitions"]) == (10, 3, 2)
    # Nothing is sent to the idle topic, yet the broker works: its fetch loop polls (streams/bench/BENCHMARKS.md).
    assert row["idle_broker_cpu_pct"] > 0, row
    assert row["hop_records"] == 12
    assert 0 < row["hop_p50_ms"] <= row["hop_p99_ms"] < 1000
