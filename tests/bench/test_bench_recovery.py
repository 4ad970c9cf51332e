"""``loopwarden bench recovery``: runs and reports both costs and their ratio (no timing asserted)."""

from __future__ import annotations

from loopwarden.bench.recovery import bench_recovery
from loopwarden.cli import main


def test_bench_recovery_reports_both_costs_and_their_ratio(capsys):
    out = bench_recovery(30, 3)
    assert out["batches"] == 30 and out["calls_per_batch"] == 3
    assert out["default_check_us_per_call"] > 0 and out["profile_batch_us_per_call"] > 0
    assert out["profile_vs_default"] > 0
    assert main(["bench", "recovery", "--batches", "10"]) == 0
    assert '"profile_vs_default"' in capsys.readouterr().out
