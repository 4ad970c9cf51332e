"""``loopwarden bench state``: what a run costs stored: bytes, decoded memory, encode and decode µs.

The worker decodes a run's value when a batch touches a run it does not hold, and encodes every
run a batch touched, so these are paid per event in an interleaved fleet. The states are those of
the engine bench's fleet trace halfway through (runs of every length and loop kind, some ended),
each in the worker's value (:class:`loopwarden.worker.runcodec.RunValue`). Times are the best of
``--repeat`` passes over all runs, each run's data cold in the caches as in a worker.
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc

import msgspec

from loopwarden.bench.engine import BENCH_CONFIG, build_trace, drive
from loopwarden.schemas.config import FleetConfig


def bench_state(events: int, seed: int, repeat: int, event_ids: bool) -> dict:
    from loopwarden.detection.state import FORMAT_VERSION
    from loopwarden.worker.runcodec import RunValue, decode_value, encode_value

    states: dict = {}
    drive(build_trace(events, seed, event_ids), FleetConfig.from_document(BENCH_CONFIG), states=states)
    values = [RunValue(offset=1, touched=1.0, state=s) for s in states.values()]
    blobs = [encode_value(v) for v in values]

    def best(fn) -> float:
        times = []
        for _ in range(repeat):
            gc.collect()
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return round(min(times) / len(values) * 1e6, 2)

    encode_us = best(lambda: [encode_value(v) for v in values])
    decode_us = best(lambda: [decode_value(b) for b in blobs])
    gc.collect()
    tracemalloc.start()
    kept = [decode_value(b) for b in blobs]
    decoded, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del kept
    return {
        "format_version": FORMAT_VERSION,
        "event_ids": event_ids,
        "runs": len(values),
        "mean_history": round(statistics.mean(len(s.history) for s in states.values()), 1),
        "stored_bytes_per_run": round(statistics.mean(map(len, blobs))),
        "decoded_bytes_per_run": round(decoded / len(values)),
        "encode_us_per_run": encode_us,
        "decode_us_per_run": decode_us,
        "at_cap": at_cap(),
    }


REALISTIC_TOOLS = (
    "functions.read_file",
    "mcp__filesystem__list_directory",
    "shell_command",
    "web_search",
    "mcp__github__get_pull_request_comments",
)


def filled_run(history_size: int, tools: tuple[str, ...] = REALISTIC_TOOLS) -> bytes:
    """The stored value of one run whose history is full: ``history_size`` distinct calls with results."""
    from loopwarden.runner import wire
    from loopwarden.runner.local import LocalDecider
    from loopwarden.worker.runcodec import RunValue, encode_value

    never = 1_000_000
    block = {"enabled": True, "historySize": history_size, "warningThreshold": never - 1}
    block.update(criticalThreshold=never, globalCircuitBreakerThreshold=never + 1)
    local = LocalDecider(FleetConfig.from_document({"tools": {"loopDetection": block}}))
    ref = wire.RunRef(agent_id="agent-bench", run_id="run-bench")
    for i in range(history_size):
        call = wire.tool_call(ref, tools[i % len(tools)], {"path": f"src/module_{i}.py", "line": i})
        local.apply(ref.key, call, now=1.0)
        local.apply(ref.key, wire.result_for(call, result={"text": f"content {i}"}), now=1.0)
    return encode_value(RunValue(offset=1, touched=1.0, state=local._states.get(ref.key)))


def at_cap() -> dict:
    """A run at the ``historySize`` cap, stored, against the largest run value a default worker writes."""
    from loopwarden.schemas.config import KNOB_CAPS
    from loopwarden.worker.settings import Settings

    cap, limit = KNOB_CAPS["historySize"], Settings().max_run_value_bytes
    realistic, long_names = len(filled_run(cap)), len(filled_run(cap, tuple(t.ljust(64, "_") for t in REALISTIC_TOOLS)))
    return {
        "history_size": cap,
        "stored_bytes": realistic,
        "stored_bytes_64_char_names": long_names,
        "bytes_per_call": round(realistic / cap, 1),
        "record_limit": limit,
        "fits": realistic <= limit and long_names <= limit,
    }


def add_arguments(p) -> None:
    p.add_argument("--events", type=int, default=50_000, help="how much of the fleet trace to apply first")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--repeat", type=int, default=5, help="timed passes; the best is reported")
    p.add_argument("--event-ids", action="store_true", help="events carry event ids, as the runner client's do")


def run(args) -> int:
    print(
        msgspec.json.format(
            msgspec.json.encode(bench_state(args.events, args.seed, args.repeat, args.event_ids))
        ).decode()
    )
    return 0
