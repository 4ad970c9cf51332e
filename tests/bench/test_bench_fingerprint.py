"""``loopwarden bench fingerprint``: runs and reports every figure with its ratio (no timing asserted)."""

from __future__ import annotations

from loopwarden.bench.fingerprint import bench_fingerprint, fleet_trace
from loopwarden.cli import main


def test_bench_fingerprint_reports_the_cost_and_that_the_fleet_trace_has_incidents_only_normalized(capsys):
    out = bench_fingerprint(runs=30, repeat=1)
    assert out["outcome_us"] > 0 and out["hostile_8k_us"] > 0 and out["normalized_vs_exact"] > 0
    assert out["events"] == len(fleet_trace(30, 6))
    # the trace is what the bench says: one failure per machine never meets exactly, but does normalized
    assert out["incidents_opened_exact"] == 0 and out["incidents_opened_normalized"] == 5
    assert main(["bench", "fingerprint", "--runs", "15", "--repeat", "1"]) == 0
    assert '"normalized_vs_exact"' in capsys.readouterr().out
