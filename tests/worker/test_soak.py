"""Bounded memory, short form of ``loopwarden bench soak``: runs idle past the TTL are dropped.

Two waves of 2,000 concurrent runs on a worker with a 10 s TTL: each wave is
counted as active, then expired to zero; the second wave's runs are expired
too (the expiry counter covers both). RSS figures are the benchmark's to
report, not asserted here.
"""

from __future__ import annotations

import pytest

from loopwarden.bench.soak import soak

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_two_waves_of_runs_expire_to_zero():
    report = soak(runs=2000, calls=2, ttl=10.0, waves=2, log=lambda *_: None)
    first, second = report["waves"]
    assert first["peak"]["active_runs"] == 2000 and second["peak"]["active_runs"] == 2000
    assert first["after_expiry"]["active_runs"] == 0 and second["after_expiry"]["active_runs"] == 0
    assert second["after_expiry"]["expired_total"] == 4000
    assert 0 < report["bytes_per_run"] < 4096
