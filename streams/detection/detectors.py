"""Streaks over a run's history (§7) and the ordered decision table (§8).

Everything is computed from the history *before* the current call is
recorded (§8.2). A signature already starts with ``<tool>:``, so equal
signatures imply equal tool names.
"""

from __future__ import annotations

import msgspec

from loopwarden.detection import messages
from loopwarden.detection.state import History
from loopwarden.schemas.config import ResolvedConfig
from loopwarden.schemas.verdicts import DetectorName, Level, LivenessSignal


class Finding(msgspec.Struct, gc=False):
    """A detector hit before the caller decides emission (§9)."""

    level: Level
    detector: DetectorName
    count: int
    warning_key: str
    message: str
    paired_tool_name: str | None = None
    liveness_signal: LivenessSignal | None = None  # openclaw-latest: "argument_churn" (loopwarden.detection.latest)


def unknown_tool_streak(h: History, tool: str) -> tuple[int, str | None]:
    """§7.1: consecutive newest records of this tool failing with one unknown-tool name."""
    tools, unknowns = h.tools, h.unknowns
    i = len(tools) - 1
    if i < 0 or tools[i] != tool or not unknowns[i]:
        return 0, None
    name = unknowns[i]
    count = 1
    i -= 1
    while i >= 0 and tools[i] == tool and unknowns[i] == name:
        count += 1
        i -= 1
    return count, name


def no_progress_streak(h: History, sig: str) -> tuple[int, str | None]:
    """§7.2: identical outcomes of signature ``sig`` since its outcome last changed."""
    args, results = h.args, h.results
    count, latest = 0, None
    for i in range(len(args) - 1, -1, -1):
        if args[i] != sig:
            continue
        result = results[i]
        if not result:
            continue
        if latest is None:
            latest, count = result, 1
        elif result == latest:
            count += 1
        else:
            break
    return count, latest


class PingPong(msgspec.Struct, gc=False):
    """The alternating tail ending in the current call (§7.4): its length, the other side, its evidence."""

    count: int
    paired_tool: str | None = None
    paired_sig: str | None = None
    evidence: bool = False


_NO_PING_PONG = PingPong(0)


def ping_pong(h: History, sig: str) -> PingPong:
    """§7.4: the alternating A,B,A,B… tail, when the current call is the B side."""
    args = h.args
    n = len(args)
    # The current call must be B, the nearest older signature differing from
    # A = args[-1]; with a tail of at least 2 that means args[-2] == sig != A.
    # B's tool name must not be blank (OpenClaw: `!otherToolName`, step 2).
    if n < 2 or args[-1] == sig or args[-2] != sig or not h.tools[-2]:
        return _NO_PING_PONG
    a = args[-1]
    k = 2
    while k < n and args[n - 1 - k] == (a if k % 2 == 0 else sig):
        k += 1
    results = h.results
    hash_a = hash_b = None
    evidence = True
    for i in range(n - k, n):
        result = results[i]
        if not result:
            evidence = False
            break
        if args[i] == a:
            if hash_a is None:
                hash_a = result
            elif hash_a != result:
                evidence = False
                break
        elif hash_b is None:
            hash_b = result
        elif hash_b != result:
            evidence = False
            break
    return PingPong(k + 1, h.tools[-1], a, evidence and hash_a is not None and hash_b is not None)


def _utf16(text: str) -> bytes:
    return text.encode("utf-16-be", "surrogatepass")


def pair_key(sig_a: str, sig_b: str) -> str:
    first, second = sorted((sig_a, sig_b), key=_utf16)
    return f"pingpong:{first}|{second}"


def decide(h: History, tool: str, sig: str, known_poll: bool, cfg: ResolvedConfig) -> Finding | None:
    """§8: the first matching row of the decision table, or None."""
    args = h.args
    if len(args) < cfg.warning_threshold:
        recent = 0  # below every threshold either way (all are >= warning_threshold); spares the index
    else:
        counts = h.__dict__.get("_counts")  # History.count, inlined: this runs for every call
        recent = (h._index() if counts is None else counts).get(sig, 0)
    # Cheap exits first: most calls have no repeats, no unknown-tool failure
    # just before them and no alternation ending in their signature.
    if (
        recent < cfg.warning_threshold
        and not (args and h.unknowns[-1] and h.tools[-1] == tool)
        and not (len(args) >= 2 and args[-2] == sig and args[-1] != sig)
    ):
        return None
    unknown_count, unknown_name = unknown_tool_streak(h, tool)
    if unknown_count >= cfg.unknown_tool_threshold:
        return Finding(
            "critical",
            "unknown_tool_repeat",
            unknown_count,
            f"unknown-tool:{tool}:{unknown_name}",
            messages.unknown_tool(unknown_name or tool, unknown_count),
        )
    # no-progress <= recent, and every threshold below is >= warning_threshold.
    if recent >= cfg.warning_threshold:
        streak, latest = no_progress_streak(h, sig)
    else:
        streak, latest = 0, None
    tail = latest or "none"
    if streak >= cfg.global_circuit_breaker_threshold:
        return Finding(
            "critical", "global_circuit_breaker", streak, f"global:{tool}:{sig}:{tail}",
            messages.global_breaker(tool, streak),
        )  # fmt: skip
    if known_poll and cfg.known_poll_no_progress:
        if streak >= cfg.critical_threshold:
            return Finding(
                "critical", "known_poll_no_progress", streak, f"poll:{tool}:{sig}:{tail}",
                messages.poll_critical(tool, streak),
            )  # fmt: skip
        if streak >= cfg.warning_threshold:
            return Finding(
                "warning", "known_poll_no_progress", streak, f"poll:{tool}:{sig}:{tail}",
                messages.poll_warning(tool, streak),
            )  # fmt: skip
    if cfg.ping_pong:
        pp = ping_pong(h, sig)
        if pp.count >= cfg.warning_threshold:
            key = pair_key(sig, pp.paired_sig) if pp.paired_sig else f"pingpong:{tool}:{sig}"
            if pp.count >= cfg.critical_threshold and pp.evidence:
                return Finding(
                    "critical", "ping_pong", pp.count, key, messages.ping_pong_critical(pp.count), pp.paired_tool
                )
            return Finding("warning", "ping_pong", pp.count, key, messages.ping_pong_warning(pp.count), pp.paired_tool)
    if not known_poll and cfg.generic_repeat:
        if streak >= cfg.critical_threshold:
            return Finding(
                "critical", "generic_repeat", streak, f"generic:{tool}:{sig}:{tail}",
                messages.generic_critical(tool, streak),
            )  # fmt: skip
        if recent >= cfg.warning_threshold:
            return Finding(
                "warning", "generic_repeat", recent, f"generic:{tool}:{sig}",
                messages.generic_warning(tool, recent),
            )  # fmt: skip
    return None
