"""``loopwarden bench engine``: events/second through decode + ``step()`` on one core.

Drives a realistic mixed fleet trace (:mod:`loopwarden.devtools.synthetic`: healthy runs
with varied params and text results, plus every loop kind, runs interleaved)
through exactly the worker's per-event path: msgspec decode of the raw bytes,
per-run state lookup, ``step()``. The payload caches start cold. The trace is
built before the clock starts; ``--profile`` runs pyinstrument over the same loop.
"""

from __future__ import annotations

import gc
import time

import msgspec

from loopwarden.detection import step
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import EventDecodeError, decode_event, state_key

BENCH_CONFIG = {"tools": {"loopDetection": {"enabled": True}}}


def build_trace(events: int, seed: int, event_ids: bool = False) -> list[bytes]:
    """``event_ids``: every event gets a fresh 32-hex ``event_id``, as the runner client sends them
    (the engine then keeps up to 128 per run to drop repeated deliveries)."""
    from loopwarden.devtools.simulate import with_event_ids
    from loopwarden.devtools.synthetic import fleet_events

    encode = msgspec.json.encode
    # A run is ~81 events with the default run length of 40 (blocked loops are shorter).
    agents = events // (70 * 4) + 1
    fleet = fleet_events(agents=agents, runs_per_agent=4, seed=seed)
    trace = [encode(e) for e in (with_event_ids(fleet, seed) if event_ids else fleet)]
    return trace[:events]


def drive(
    trace: list[bytes], fleet: FleetConfig, with_ext: bool = False, states: dict | None = None
) -> tuple[int, int]:
    """The worker's per-event path, minus Kafka: returns (detections, emitted).

    ``with_ext``: pass each agent's ``loopwarden`` block (the default leaves it out, as this bench
    always has, so its numbers compare across commits). ``states``: the runs' states, kept there."""
    states = {} if states is None else states
    detections = emitted = 0
    resolve = fleet.resolve
    extensions_of = fleet.extensions_of if with_ext else lambda _event: None
    for raw in trace:
        try:
            event = decode_event(raw)
        except EventDecodeError:
            continue
        key = state_key(event)
        result = step(states.get(key), event, resolve(event.agent_id), ext=extensions_of(event))
        if result.state is None:
            states.pop(key, None)
        else:
            states[key] = result.state
        if result.detections:
            detections += len(result.detections)
            emitted += sum(d.emitted for d in result.detections)
    return detections, emitted


def hashing_floor(trace: list[bytes]) -> None:
    """The unavoidable work per event, nothing else: decode the event, then
    decode, canonically re-encode and SHA-256 its params and its result. No
    engine can do less for a trace whose payloads are all distinct."""
    import hashlib

    from msgspec import UNSET

    from loopwarden.detection.canonical import canonical_bytes
    from loopwarden.detection.payloads import load

    sha = hashlib.sha256
    for raw in trace:
        event = decode_event(raw)
        params = getattr(event, "params", None)
        if params is None:
            continue
        sha(canonical_bytes(load(b"{}" if params is UNSET else bytes(params)))).hexdigest()
        result = getattr(event, "result", UNSET)
        if result is not UNSET:
            sha(canonical_bytes(load(bytes(result)))).hexdigest()


def bench_engine(
    events: int, seed: int, repeat: int, profile: bool, event_ids: bool = False, rules: str | None = None
) -> dict:
    """``rules``: ``loopwarden.profile`` for every agent (None: OpenClaw's docs revision)."""
    from loopwarden.detection import latest_hashing, payloads

    fleet = FleetConfig.from_document({**BENCH_CONFIG, "loopwarden": {"profile": rules}} if rules else BENCH_CONFIG)
    trace = build_trace(events, seed, event_ids)
    size = sum(map(len, trace))
    runs, cpu, floor = [], [], []
    for _ in range(repeat):  # engine and floor alternate, so a noisy spell on a shared machine hits both
        payloads.HASHER.clear()
        latest_hashing.LATEST_HASHER.clear()
        gc.collect()
        start, start_cpu = time.perf_counter(), time.process_time()
        detections, emitted = drive(trace, fleet, rules is not None)
        runs.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        start = time.perf_counter()
        hashing_floor(trace)
        floor.append(time.perf_counter() - start)
    best = min(runs)
    report = {
        "rules": rules or "openclaw",
        "events": len(trace),
        "event_ids": event_ids,
        "mean_event_bytes": round(size / len(trace)),
        "detections": detections,
        "emitted": emitted,
        "seconds_best": round(best, 3),
        "events_per_second": round(len(trace) / best),
        "us_per_event": round(best / len(trace) * 1e6, 2),
        "cpu_seconds_best": round(min(cpu), 3),
        "runs_seconds": [round(r, 3) for r in runs],
        "floor_events_per_second": round(len(trace) / min(floor)),
        "engine_vs_floor": round(min(floor) / best, 2),
    }
    if profile:
        from pyinstrument import Profiler

        payloads.HASHER.clear()
        latest_hashing.LATEST_HASHER.clear()
        profiler = Profiler(interval=0.0005)
        profiler.start()
        drive(trace, fleet, rules is not None)
        profiler.stop()
        report["profile"] = profiler.output_text(unicode=False, color=False, show_all=False)
    return report


def add_arguments(p) -> None:
    p.add_argument("--events", type=int, default=200_000, help="trace length")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--repeat", type=int, default=3, help="timed runs; the best is reported")
    p.add_argument("--profile", action="store_true", help="also print a pyinstrument profile")
    p.add_argument(
        "--event-ids",
        action="store_true",
        help="give every event an event_id, as the runner client does (default: none, as before)",
    )
    p.add_argument(
        "--rules",
        choices=["openclaw", "openclaw-latest"],
        default="openclaw",
        help="the docs revision's rules (default) or the openclaw-latest profile for every agent",
    )


def run(args) -> int:
    rules = None if args.rules == "openclaw" else args.rules
    report = bench_engine(args.events, args.seed, args.repeat, args.profile, args.event_ids, rules)
    profile = report.pop("profile", None)
    print(msgspec.json.format(msgspec.json.encode(report)).decode())
    if profile:
        print(profile)
    return 0
