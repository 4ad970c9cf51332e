"""``loopwarden bench signing``: runs and reports every figure with its ratio (no timing asserted)."""

from __future__ import annotations

from loopwarden.bench.signing import bench_signing
from loopwarden.cli import main


def test_bench_signing_reports_each_cost_and_its_ratio(capsys):
    out = bench_signing(50)
    assert out["records"] == 50 and out["value_bytes"] > 0
    for name in ("sign", "verify", "keyed_warning_key"):
        assert out[f"{name}_us"] > 0 and out[f"{name}_vs_encode"] > 0
    assert main(["bench", "signing", "--records", "20"]) == 0
    assert '"sign_vs_encode"' in capsys.readouterr().out
