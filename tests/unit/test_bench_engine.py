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
