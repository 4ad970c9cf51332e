"""``bench all`` combines the figures of one run into ratios and marks each target (no timing asserted)."""

from loopwarden.bench.all import ratios, text


def _report(drain: float, engine: float, p99_fixed: float, p99_fraction: float, gate_p99: float) -> dict:
    return {
        "engine": {
            "events": 1000,
            "events_per_second": engine,
            "us_per_event": 1e6 / engine,
            "cpu_seconds_best": 1000 / engine,
            "floor_events_per_second": 2 * engine,
            "engine_vs_floor": 0.5,
        },
        "worker": {
            "worker_events_per_s": drain,
            "raw_consume_per_s": 10 * drain,
            "ratio_to_raw": 0.1,
            "worker_cpu_us_per_event": 4e6 / engine,
            "latency": [
                {"rate": 2000.0, "of_drain": 2000 / drain, "p99_ms": p99_fixed},
                {"rate": drain / 4, "of_drain": 0.25, "p99_ms": p99_fraction},
            ],
        },
        "gate": {
            "decisions_per_s": 500.0,
            "target_per_s": 500.0,
            "p50_ms": 1,
            "p95_ms": 2,
            "p99_ms": gate_p99,
            "max_ms": 3,
            "to_worker_p99_ms": 1,
            "to_runner_p99_ms": 1,
            "fail_open": 0,
            "cpu": {},
        },
        "seconds": 1.0,
    }


def test_ratios_compare_figures_of_the_same_run():
    r = ratios(_report(drain=30_000, engine=60_000, p99_fixed=20, p99_fraction=60, gate_p99=30))
    assert r["drain_vs_engine"] == 0.5
    assert r["drain_vs_engine_cpu"] == 0.25  # worker CPU per event is 4x the engine's
    assert r["engine_vs_floor"] == 0.5
    assert (r["latency_fixed_p99_ms"], r["latency_fraction_p99_ms"], r["gate_p99_ms"]) == (20, 60, 30)


def test_text_marks_met_and_missed_targets():
    report = _report(drain=30_000, engine=60_000, p99_fixed=20, p99_fraction=60, gate_p99=30)
    report["ratios"] = ratios(report)
    lines = text(report).splitlines()
    assert "target >= 0.5: met" in lines[1]  # drain/engine exactly at the target
    assert "target <= 25.0: met" in lines[2]
    assert "target <= 50.0: NOT met" in lines[3]
    assert "target <= 25.0: NOT met" in lines[4]
    assert "target >= 0.55: NOT met" in lines[0]


def test_latency_levels_are_compared_with_their_broker_floor():
    report = _report(drain=30_000, engine=60_000, p99_fixed=20, p99_fraction=60, gate_p99=30)
    report["worker"]["latency"][0]["floor"] = {"p50_ms": 4, "p99_ms": 8}
    r = report["ratios"] = ratios(report)
    assert r["latency_fixed_p99_vs_floor"] == 2.5
    assert "latency_fraction_p99_vs_floor" not in r  # that level has no floor measured
    lines = text(report).splitlines()
    assert "broker floor" in lines[3] and "p99 8 ms" in lines[3] and "worker/floor p99 2.5" in lines[3]
    assert "target <= 50.0: NOT met" in lines[4]


def test_skipped_parts_leave_their_ratios_out():
    report = _report(drain=30_000, engine=60_000, p99_fixed=20, p99_fraction=60, gate_p99=30)
    del report["engine"], report["gate"]
    r = ratios(report)
    assert "drain_vs_engine" not in r and "gate_p99_ms" not in r
    assert r["latency_fixed_p99_ms"] == 20
