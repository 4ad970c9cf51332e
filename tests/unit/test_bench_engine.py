"""The engine benchmark runs the worker's decode + step() path (smoke test; no timing asserted)."""

from streams.bench.engine import BENCH_CONFIG, build_trace, drive
from schemas.config import FleetConfig


def test_bench_trace_exercises_every_detector():
    trace = build_trace(6000, seed=3)
    assert len(trace) == 6000
    fleet = FleetConfig.from_document(BENCH_CONFIG)
    detections, emitted = drive(trace, fleet)
    assert detections > emitted > 0


def test_synthetic_fleet_produces_each_loop_kind():
    from streams.replay import replay_lines

    rows = list(replay_lines(build_trace(20000, seed=5), FleetConfig.from_document(BENCH_CONFIG)))
    detectors = {r["detector"] for r in rows if isinstance(r, dict)}
    assert detectors >= {
        "generic_repeat",
        "known_poll_no_progress",
        "ping_pong",
        "unknown_tool_repeat",
        "compaction_loop_persisted",
    }
