"""``loopwarden bench all``: every benchmark in one run, each figure with its ratios.

In order: the engine (decode + ``step()`` against its hashing floor), one
worker on the embedded broker (backlog drain, then event->verdict latency
at a fixed rate and at a fraction of the drain rate just measured), and the
gate-mode round trip of runner clients at a fixed decision rate. The ratios
compare figures of this one run (drain / engine events/s, engine / floor),
so they mean something on a noisy shared machine where absolute numbers
drift between runs. Targets are printed beside each figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

TARGETS = {
    "drain_vs_engine": 0.5,  # at least
    "engine_vs_floor": 0.55,  # at least
    "latency_fixed_p99_ms": 25.0,  # at most
    "latency_fraction_p99_ms": 50.0,  # at most
    "gate_p99_ms": 25.0,  # at most
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="shorter run (smaller trace and backlog, 8 s levels)")
    p.add_argument("--engine-events", type=int, default=None, help="engine trace length (default 200k; quick 50k)")
    p.add_argument("--events", type=int, default=None, help="worker backlog (default 100k; quick 50k)")
    p.add_argument("--seconds", type=float, default=None, help="seconds per latency level (default 15; quick 8)")
    p.add_argument("--latency-rate", type=float, default=2000.0, help="fixed event->verdict rate, events/s")
    p.add_argument("--latency-fraction", type=float, default=0.25, help="second rate, as a fraction of the drain rate")
    p.add_argument("--gate-rate", type=float, default=500.0, help="gate round-trip decisions/s")
    p.add_argument("--runners", type=int, default=4, help="runner clients for the gate round trip")
    p.add_argument("--skip", default="", help="comma-separated parts to skip: engine,worker,gate")
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")
    p.add_argument(
        "--event-ids", action="store_true", help="engine and worker events carry an event_id, as the runner client's do"
    )
    p.add_argument("worker_args", nargs=argparse.REMAINDER, help="extra flags for the worker (after --)")


def bench_all(args: argparse.Namespace) -> dict[str, Any]:
    from loopwarden.bench import engine, latency, worker

    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    quick = args.quick
    seconds = args.seconds or (8.0 if quick else 15.0)
    extra = [a for a in args.worker_args if a != "--"]
    report: dict[str, Any] = {"targets": TARGETS}
    started = time.perf_counter()
    if "engine" not in skip:
        eng = engine.bench_engine(
            args.engine_events or (50_000 if quick else 200_000),
            seed=7,
            repeat=2 if quick else 3,
            profile=False,
            event_ids=args.event_ids,
        )
        report["engine"] = eng
    if "worker" not in skip:
        rates: tuple[float | str, ...] = (args.latency_rate, str(args.latency_fraction))
        report["worker"] = worker.measure(
            args.events or (50_000 if quick else 100_000), 200, seconds, rates, extra, event_ids=args.event_ids
        )
    if "gate" not in skip:
        gate = asyncio.run(latency.bench(args.runners, args.gate_rate, seconds, [1.0], 20.0, 200.0, extra))
        report["gate"] = gate["levels"][0]
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["ratios"] = ratios(report)
    return report


def ratios(report: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    eng, wrk, gate = report.get("engine"), report.get("worker"), report.get("gate")
    if eng:
        out["engine_vs_floor"] = eng["engine_vs_floor"]
    if eng and wrk:
        out["drain_vs_engine"] = round(wrk["worker_events_per_s"] / eng["events_per_second"], 3)
        # The same ratio in CPU time per event: steadier when other processes share the cores.
        engine_cpu_us = eng["cpu_seconds_best"] / eng["events"] * 1e6
        out["drain_vs_engine_cpu"] = round(engine_cpu_us / wrk["worker_cpu_us_per_event"], 3)
    if wrk:
        out["drain_vs_raw_consume"] = wrk["ratio_to_raw"]
        lats = wrk["latency"]
        for name, lat in zip(("latency_fixed_p99", "latency_fraction_p99"), lats):
            out[f"{name}_ms"] = lat.get("p99_ms")
            floor = (lat.get("floor") or {}).get("p99_ms")
            if floor and lat.get("p99_ms") is not None:
                out[f"{name}_vs_floor"] = round(lat["p99_ms"] / floor, 2)
    if gate:
        out["gate_p99_ms"] = gate["p99_ms"]
    return out


def _mark(name: str, value: Any) -> str:
    target = TARGETS.get(name)
    if target is None or value is None or value != value:
        return ""
    ok = value >= target if name in ("drain_vs_engine", "engine_vs_floor") else value <= target
    sign = ">=" if name in ("drain_vs_engine", "engine_vs_floor") else "<="
    return f"  [target {sign} {target}: {'met' if ok else 'NOT met'}]"


def text(report: dict[str, Any]) -> str:
    r = report["ratios"]
    lines = []
    eng, wrk, gate = report.get("engine"), report.get("worker"), report.get("gate")
    if eng:
        lines.append(
            f"engine:   {eng['events_per_second']:>8} events/s ({eng['us_per_event']} us/event); "
            f"hashing floor {eng['floor_events_per_second']} events/s; "
            f"engine/floor {r['engine_vs_floor']}{_mark('engine_vs_floor', r['engine_vs_floor'])}"
        )
    if wrk:
        line = (
            f"worker:   {wrk['worker_events_per_s']:>8} events/s backlog drain; raw consume "
            f"{wrk['raw_consume_per_s']} msg/s (drain/raw {r['drain_vs_raw_consume']})"
        )
        if "drain_vs_engine" in r:
            line += (
                f"; drain/engine {r['drain_vs_engine']}{_mark('drain_vs_engine', r['drain_vs_engine'])}; "
                f"worker {wrk['worker_cpu_us_per_event']} us CPU/event, engine/worker CPU per event "
                f"{r['drain_vs_engine_cpu']}"
            )
        lines.append(line)
        for i, lat in enumerate(wrk["latency"]):
            name = "latency_fixed_p99_ms" if i == 0 else "latency_fraction_p99_ms"
            lines.append(
                f"latency:  {lat.get('rate')} events/s ({lat.get('of_drain')} of drain), "
                f"{lat.get('verdicts')} verdicts: p50 {lat.get('p50_ms')} p90 {lat.get('p90_ms')} "
                f"p99 {lat.get('p99_ms')} max {lat.get('max_ms')} ms{_mark(name, lat.get('p99_ms'))}; "
                f"p99 by quarter of the window {lat.get('p99_by_quarter_ms')}"
            )
            floor = lat.get("floor")
            if floor:
                lines.append(
                    f"          broker floor (plain relay, fresh broker): p50 {floor.get('p50_ms')} "
                    f"p99 {floor.get('p99_ms')} ms, by quarter {floor.get('p99_by_quarter_ms')}; "
                    f"worker/floor p99 {r.get(name.replace('_ms', '_vs_floor'))}"
                )
    if gate:
        lines.append(
            f"gate:     {gate['decisions_per_s']}/s of {gate['target_per_s']}/s, "
            f"round trip p50 {gate['p50_ms']} p95 {gate['p95_ms']} p99 {gate['p99_ms']} "
            f"max {gate['max_ms']} ms; runner->worker p99 {gate['to_worker_p99_ms']}, "
            f"worker->runner p99 {gate['to_runner_p99_ms']}; fail-open {gate['fail_open']}; "
            f"CPU% {gate['cpu']}, idle beforehand (no calls) {gate.get('idle_cpu')}"
            f"{_mark('gate_p99_ms', gate['p99_ms'])}"
        )
    lines.append(f"total {report['seconds']} s")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = bench_all(args)
    print(text(report))
    if args.json:
        print(json.dumps(report))
    return 0
