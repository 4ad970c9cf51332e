"""``loopwarden bench screening``: µs per KB of hostile records through the worker's screen, 1 KB to the limit.

Each shape is built at every size from 1 KB up to ``max_event_bytes`` and run
through :func:`loopwarden.worker.screening.screen` (size and depth checks, then
the decode) exactly as the batch path runs it. Linear work shows as a flat
µs/KB column; ``spread`` is the largest µs/KB of a shape over its smallest
(it includes the one step up where the record outgrows the CPU caches, at
64-256 KB), ``growth_last_step`` the µs/KB at the limit over that at the size
before (a quarter of it): about 1 when linear, 4 or more when quadratic. ``--step``
also times ``step()`` on each record that passes: the payload's hashing,
exact JavaScript number formatting included, which is what huge payloads of
numbers cost (streams/ARCHITECTURE.md, "Cost of hostile payloads").
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from loopwarden.schemas.events import EventDecodeError
from loopwarden.worker.screening import screen

_HEAD = b'{"type":"tool_call","agent_id":"a","run_id":"r","tool_name":"t","params":'


def _fill(size: int, unit: bytes) -> bytes:
    return unit * max(1, size // len(unit))


def escape_run(size: int) -> bytes:
    """An unterminated string of 70 brackets and ``\\"`` escapes (the shape that was quadratic)."""
    return _HEAD + b'"' + b"[" * 70 + _fill(size - len(_HEAD) - 72, b'\\"')


def escape_string(size: int) -> bytes:
    """The same escapes in a closed string: a valid event that decodes."""
    return _HEAD + b'["' + _fill(size - len(_HEAD) - 8, b'\\"') + b'"' + b"]}"


def deep_arrays(size: int) -> bytes:
    half = max(1, (size - len(_HEAD) - 1) // 2)
    return _HEAD + b"[" * half + b"]" * half + b"}"


def many_brackets(size: int) -> bytes:
    """Shallow but bracket-heavy: the cheap bound trips, the exact depth lets it through."""
    return _HEAD + b"[" + _fill(size - len(_HEAD) - 8, b"[1],") + b"[1]]}"


def digit_run(size: int) -> bytes:
    return _HEAD + b'{"n":1' + _fill(size - len(_HEAD) - 8, b"1") + b"}}"


def many_keys(size: int) -> bytes:
    n = max(1, (size - len(_HEAD) - 3) // 14)
    body = b",".join(b'"k%08d":1' % i for i in range(n))
    return _HEAD + b"{" + body + b"}}"


def many_keys_cut(size: int) -> bytes:
    """The same, its last byte cut: msgspec refuses it and the exact JavaScript reading gives the reason."""
    return many_keys(size)[:-1]


def many_ints(size: int) -> bytes:
    """18-digit integers: beyond 2**53, so hashing formats each the JavaScript way (§2.3)."""
    return _HEAD + b"[" + b",".join([b"123456789012345678"] * max(1, (size - len(_HEAD) - 3) // 19)) + b"]}"


def many_floats(size: int) -> bytes:
    return _HEAD + b"[" + b",".join([b"1.2345678901234567e-300"] * max(1, (size - len(_HEAD)) // 24)) + b"]}"


SHAPES: dict[str, Callable[[int], bytes]] = {
    "escape_run": escape_run,
    "escape_string": escape_string,
    "deep_arrays": deep_arrays,
    "many_brackets": many_brackets,
    "digit_run": digit_run,
    "many_keys": many_keys,
    "many_keys_cut": many_keys_cut,
    "many_ints": many_ints,
    "many_floats": many_floats,
}


def sizes_up_to(limit: int) -> list[int]:
    """1 KB, 4 KB, 16 KB, ... and the limit itself."""
    out, size = [], 1024
    while size < limit:
        out.append(size)
        size *= 4
    return [*out, limit]


def time_screen(raw: bytes, max_bytes: int, max_depth: int, budget: float) -> tuple[float, str]:
    """Best seconds per screen of ``raw`` over repeats filling about ``budget`` seconds, and its outcome."""
    best, spent, outcome = float("inf"), 0.0, "ok"
    while spent < budget or best == float("inf"):
        start = time.perf_counter()
        try:
            screen(raw, max_bytes, max_depth)
        except EventDecodeError as exc:
            outcome = exc.reason
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
    return best, outcome


def time_step(raw: bytes, max_bytes: int, max_depth: int, budget: float) -> float | None:
    """Best seconds of ``step()`` (hashing included, payload memo cold) on the screened event; None if refused."""
    from loopwarden.detection import payloads, step
    from loopwarden.schemas.config import FleetConfig

    try:
        event = screen(raw, max_bytes, max_depth)
    except EventDecodeError:
        return None
    config = FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}}).resolve("a")
    best, spent = float("inf"), 0.0
    while spent < budget or best == float("inf"):
        payloads.HASHER.clear()
        start = time.perf_counter()
        step(None, event, config)
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
    return best


def bench_screening(max_bytes: int, max_depth: int, budget: float, shapes: list[str], with_step: bool = False) -> dict:
    report: dict = {"max_event_bytes": max_bytes, "max_depth": max_depth, "shapes": {}}
    for name in shapes:
        rows = []
        for size in sizes_up_to(max_bytes):
            raw = SHAPES[name](size)[:max_bytes]
            seconds, outcome = time_screen(raw, max_bytes, max_depth, budget)
            if with_step:
                stepped = time_step(raw, max_bytes, max_depth, budget)
                if stepped is not None:
                    outcome += f", step {stepped * 1e3:.1f} ms"
            rows.append(
                {
                    "kb": round(len(raw) / 1024, 1),
                    "us_per_kb": round(seconds * 1e6 / (len(raw) / 1024), 2),
                    "outcome": outcome,
                }
            )
        per_kb = [r["us_per_kb"] for r in rows if r["kb"] >= 4] or [rows[-1]["us_per_kb"]]
        last, before = rows[-1], rows[-2] if len(rows) > 1 else rows[-1]
        report["shapes"][name] = {
            "rows": rows,
            "spread": round(max(per_kb) / max(min(per_kb), 1e-9), 2),
            # µs/KB at the limit over µs/KB at the size before (a quarter of it, or less): ~1 when linear,
            # ~4 or more when quadratic
            "growth_last_step": round(last["us_per_kb"] / max(before["us_per_kb"], 1e-9), 2),
        }
    return report


def add_arguments(p) -> None:
    p.add_argument("--max-event-bytes", type=int, default=1_048_576, help="the largest size measured (the limit)")
    p.add_argument("--max-depth", type=int, default=64)
    p.add_argument("--budget", type=float, default=0.2, help="seconds of repeats per shape and size (best kept)")
    p.add_argument("--shape", action="append", choices=sorted(SHAPES), help="only these shapes (default: all)")
    p.add_argument(
        "--step", action="store_true", help="also time step() (hashing the payload, memo cold) on what passes"
    )


def run(args) -> int:
    report = bench_screening(args.max_event_bytes, args.max_depth, args.budget, args.shape or list(SHAPES), args.step)
    print(msgspec.json.format(msgspec.json.encode(report)).decode())
    return 0
