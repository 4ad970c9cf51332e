"""``loopwarden bench soak``: memory against active runs, and after their expiry.

One worker on the embedded broker. Two waves, each of ``--runs`` concurrent
runs (every run a few healthy calls with results, then idle): after each
wave the worker's RSS and ``loopwarden_active_runs`` are sampled, then again
once the runs are idle past ``--ttl`` and the expiry sweep has dropped them.
Bounded memory means: RSS after expiry stops growing once RocksDB's
bounded memtables and block cache have filled (a wave or two; with
``-- --rocksdb-write-buffer-mb 1 --rocksdb-block-cache-mb 1`` from the
second wave on), and the peaks stop rising with them. The stored bytes per run are
the encoded run values of the same events, computed with the worker's own
codec.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CONFIG = {"tools": {"loopDetection": {"enabled": True}}}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=100_000, help="concurrent runs per wave")
    p.add_argument("--calls", type=int, default=3, help="calls (each with its result) per run")
    p.add_argument(
        "--ttl", type=float, default=120.0, help="the worker's run_ttl, seconds (longer than a wave takes to drain)"
    )
    p.add_argument("--waves", type=int, default=2)
    p.add_argument("--json", action="store_true", help="print the report as JSON only")
    p.add_argument("worker_args", nargs=argparse.REMAINDER, help="extra flags for the worker (after --)")


def run_events(wave: int, runs: int, calls: int) -> Iterator[dict]:
    """``runs`` runs of ``calls`` distinct healthy calls, each followed by its result, one run after another
    (so a run goes idle as soon as its events are in, and all of a wave's runs are alive at once)."""
    for r in range(runs):
        run = f"soak-{wave}-{r}"
        for i in range(calls):
            call = {
                "type": "tool_call",
                "agent_id": f"agent-{r % 500}",
                "session_id": f"s-{run}",
                "run_id": run,
                "tool_name": "read",
                "tool_call_id": f"{run}-{i}",
                "params": {"path": f"/f/{r}/{i}"},
            }
            yield call
            yield {**call, "type": "tool_result", "result": {"content": [{"type": "text", "text": f"ok {i}"}]}}


def bytes_per_run(calls: int) -> int:
    """The stored value of one run after ``calls`` calls, encoded as the worker stores it."""
    from loopwarden.detection import step
    from loopwarden.schemas.config import FleetConfig
    from loopwarden.schemas.events import decode_event
    from loopwarden.worker.runcodec import RunValue, encode_value

    fleet = FleetConfig.from_document(CONFIG)
    state = None
    for event in run_events(0, 1, calls):
        ev = decode_event(json.dumps(event))
        state = step(state, ev, fleet.resolve(ev.agent_id)).state
    return len(encode_value(RunValue(offset=2 * calls, touched=time.time(), state=state)))


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _wait(predicate: Any, timeout: float, every: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False


def soak(runs: int, calls: int, ttl: float, waves: int, log: Any = print, worker_args: list[str] = ()) -> dict:
    from loopwarden.devtools.broker import EmbeddedBroker
    from loopwarden.devtools.processes import WorkerProcess
    from loopwarden.devtools.simulate import publish

    report: dict[str, Any] = {
        "runs": runs,
        "calls_per_run": calls,
        "ttl_s": ttl,
        "bytes_per_run": bytes_per_run(calls),
        "waves": [],
    }
    with tempfile.TemporaryDirectory(prefix="lw-soak-") as tmp, EmbeddedBroker() as broker:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(CONFIG))
        worker = WorkerProcess(
            broker.url,
            Path(tmp) / "data",
            config=config,
            log_level="warning",
            extra=["--run-ttl", str(ttl), "--expire-interval", str(max(1.0, ttl / 4)), *worker_args],
        ).start()
        try:
            worker.wait_ready()
            report["rss_idle_mib"] = round(rss_mib(worker.pid), 1)
            processed = 0.0
            for wave in range(waves):
                n = runs * calls * 2
                asyncio.run(
                    publish(
                        broker.bootstrap, "agent.events", run_events(wave, runs, calls), 0, None, count=n, linger_ms=20
                    )
                )
                processed += n
                _wait(lambda done=processed: worker.metrics().get("loopwarden_events_total", 0) >= done, 600)
                _wait(lambda: worker.metrics().get("loopwarden_active_runs", 0) >= runs, 120)
                peak = {
                    "active_runs": worker.metrics().get("loopwarden_active_runs"),
                    "rss_mib": round(rss_mib(worker.pid), 1),
                }
                log(f"wave {wave + 1}: {peak['active_runs']:.0f} active runs, RSS {peak['rss_mib']} MiB")
                _wait(lambda: worker.metrics().get("loopwarden_active_runs", 1) == 0, ttl * 4 + 120)
                after = {
                    "active_runs": worker.metrics().get("loopwarden_active_runs"),
                    "rss_mib": round(rss_mib(worker.pid), 1),
                    "expired_total": worker.metrics().get("loopwarden_expired_runs_total"),
                }
                log(f"wave {wave + 1} expired: {after['active_runs']:.0f} active runs, RSS {after['rss_mib']} MiB")
                report["waves"].append({"peak": peak, "after_expiry": after})
        finally:
            worker.stop()
    first = report["waves"][0]
    after = [w["after_expiry"]["rss_mib"] for w in report["waves"]]
    report["rss_after_expiry_mib"] = after
    report["rss_growth_after_expiry_mib"] = round(after[-1] - after[0], 1)
    # RocksDB's memtables and block cache fill up to their bound over the first waves (deploy/OPERATIONS.md,
    # "Memory"); a leak shows as growth that goes on wave after wave, so the last step is the tell.
    report["rss_growth_last_wave_mib"] = round(after[-1] - after[-2], 1) if len(after) > 1 else None
    report["rss_mib_per_1k_active_runs"] = round(
        1000 * (first["peak"]["rss_mib"] - report["rss_idle_mib"]) / max(1, runs), 2
    )
    return report


def run(args: argparse.Namespace) -> int:
    quiet = args.json
    report = soak(
        args.runs,
        args.calls,
        args.ttl,
        args.waves,
        log=(lambda *_: None) if quiet else print,
        worker_args=[a for a in args.worker_args if a != "--"],
    )
    print(json.dumps(report) if quiet else json.dumps(report, indent=2))
    return 0
