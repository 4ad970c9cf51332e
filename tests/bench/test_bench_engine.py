"""The engine benchmark runs the worker's decode + step() path (smoke test; no timing asserted)."""

from loopwarden.bench.engine import BENCH_CONFIG, build_trace, drive
from loopwarden.schemas.config import FleetConfig


def test_bench_trace_exercises_every_detector():
    trace = build_trace(6000, seed=3)
    assert len(trace) == 6000
    fleet = FleetConfig.from_document(BENCH_CONFIG)
    detections, emitted = drive(trace, fleet)
    assert detections > emitted > 0


def test_synthetic_fleet_produces_each_loop_kind():
    from loopwarden.replay import replay_lines

    rows = list(replay_lines(build_trace(20000, seed=5), FleetConfig.from_document(BENCH_CONFIG)))
    detectors = {r["detector"] for r in rows if isinstance(r, dict)}
    assert detectors >= {
        "generic_repeat",
        "known_poll_no_progress",
        "ping_pong",
        "unknown_tool_repeat",
        "compaction_loop_persisted",
    }


def test_event_ids_change_no_verdict():
    # --event-ids measures what the runner client sends; the ids are all distinct, so nothing is dropped.
    from loopwarden.replay import replay_lines

    fleet = FleetConfig.from_document(BENCH_CONFIG)
    plain, with_ids = build_trace(8000, seed=5), build_trace(8000, seed=5, event_ids=True)
    assert all(b'"event_id"' in raw for raw in with_ids) and not any(b'"event_id"' in raw for raw in plain)
    assert drive(with_ids, fleet) == drive(plain, fleet)
    assert list(replay_lines(with_ids, fleet)) == list(replay_lines(plain, fleet))


def test_with_event_ids_gives_distinct_ids_reproducibly():
    from loopwarden.devtools.simulate import endless_fleet, with_event_ids

    def ids(seed: int) -> list[str]:
        source = with_event_ids(endless_fleet(5, 0.3, seed=1), seed=seed)
        return [next(source)["event_id"] for _ in range(500)]

    first = ids(0)
    assert len(set(first)) == 500 and all(len(i) == 32 and int(i, 16) >= 0 for i in first)
    assert ids(0) == first and ids(1) != first


def test_bench_state_measures_the_runs_the_trace_leaves_stored():
    from loopwarden.bench.state import bench_state
    from loopwarden.detection.state import FORMAT_VERSION

    plain, with_ids = bench_state(3000, seed=3, repeat=1, event_ids=False), bench_state(3000, 3, 1, True)
    assert plain["format_version"] == FORMAT_VERSION and plain["runs"] == with_ids["runs"] > 10
    # 8 bytes of digest per remembered id, and nothing else differs
    per_run_ids = with_ids["stored_bytes_per_run"] - plain["stored_bytes_per_run"]
    assert 0 < per_run_ids <= 8 * 128 + 3
    assert plain["decoded_bytes_per_run"] > 0 and plain["encode_us_per_run"] > 0
