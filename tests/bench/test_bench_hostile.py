"""``loopwarden bench screening`` and ``bench config`` run and report what they say (smoke; no timing asserted)."""

from __future__ import annotations

import json

from loopwarden.bench.config import bench_config
from loopwarden.bench.screening import SHAPES, bench_screening, sizes_up_to
from loopwarden.cli import main as cli


def test_every_screening_shape_fits_the_limit_and_gets_its_outcome():
    report = bench_screening(16_384, 64, 0.0, list(SHAPES), with_step=True)
    assert set(report["shapes"]) == set(SHAPES)
    outcomes = {name: shape["rows"][-1]["outcome"].split(",")[0] for name, shape in report["shapes"].items()}
    assert outcomes == {
        "escape_run": "bad_json",
        "escape_string": "ok",
        "deep_arrays": "too_deep",
        "many_brackets": "ok",
        "digit_run": "ok",
        "many_keys": "ok",
        "many_keys_cut": "bad_json",
        "many_ints": "ok",
        "many_floats": "ok",
    }
    assert "step" in report["shapes"]["many_floats"]["rows"][-1]["outcome"]
    for shape in SHAPES.values():
        assert all(len(shape(size)) <= size for size in sizes_up_to(1_048_576))


def test_bench_config_applies_every_record(capsys):
    report = bench_config(2000, 200, broker=False)
    assert report["feed"]["applied"] == 2000 and report["copying"]["records"] == 200
    assert cli(["bench", "config", "--records", "500", "--copying-records", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["feed"]["records"] == 500
