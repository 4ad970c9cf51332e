"""``loopwarden bench tune``: a ``loopwarden tune --sweep`` of N settings over a synthetic fleet trace.

The trace is the engine bench's (:mod:`loopwarden.devtools.synthetic`, every loop
kind, runs interleaved). Timed as ``tune`` runs: decoding and hashing once
(from cold payload caches), then the rules under each setting plus counting.
"""

from __future__ import annotations

import time

import msgspec

from loopwarden.bench.engine import BENCH_CONFIG, build_trace
from loopwarden.schemas.config import FleetConfig


def bench_tune(events: int, settings: int, seed: int, jobs: int) -> dict:
    from loopwarden.detection import payloads
    from loopwarden.tune import memo_room, prepare, tune

    trace = build_trace(events, seed)
    points = [{"warningThreshold": w} for w in range(5, 5 + settings)]
    payloads.HASHER.clear()
    with memo_room():  # as loopwarden tune: decoding (with the payload hashes) once, then the sweep
        start = time.perf_counter()
        prep = prepare(trace)
        decode_s = time.perf_counter() - start
        report = tune(prep, FleetConfig.from_document(BENCH_CONFIG), points, jobs=jobs)
    first, last = report.settings[0].fleet, report.settings[-1].fleet
    return {
        "events": len(prep.events),
        "runs": report.runs,
        "settings": len(points),
        "jobs": jobs,
        "active_events": len(prep.active),
        "decode_seconds": round(decode_s, 3),
        "total_seconds": round(decode_s + report.seconds, 3),
        "sweep_seconds": report.seconds,
        "seconds_per_setting": round(report.seconds / len(points), 3),
        "event_settings_per_second": round(len(prep.events) * len(points) / report.seconds),
        f"blocked_runs_at_warningThreshold_{points[0]['warningThreshold']}": first.blocked,
        f"blocked_runs_at_warningThreshold_{points[-1]['warningThreshold']}": last.blocked,
    }


def add_arguments(p) -> None:
    p.add_argument("--events", type=int, default=100_000, help="trace length")
    p.add_argument("--settings", type=int, default=20, help="sweep points (warningThreshold=5..)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--jobs", type=int, default=1, help="processes, as loopwarden tune --jobs")


def run(args) -> int:
    jobs = max(args.jobs, 1)
    print(msgspec.json.format(msgspec.json.encode(bench_tune(args.events, args.settings, args.seed, jobs))).decode())
    return 0
