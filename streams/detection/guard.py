"""The post-compaction guard (§10): abort when a compaction did not break the loop."""

from __future__ import annotations

from loopwarden.detection import messages
from loopwarden.detection.state import Guard
from loopwarden.schemas.verdicts import Detection


def arm(guard: Guard, window_size: int) -> None:
    """§10.2: every compaction retry (re-)arms the guard and clears its window."""
    guard.remaining = window_size
    guard.window = []


def observe(guard: Guard, tool: str, sig: str, result_hash: str, window_size: int) -> Detection | None:
    """§10.3: feed one recorded (tool, argsHash, resultHash); an abort only once per run."""
    if guard.remaining <= 0:
        return None
    guard.remaining -= 1
    triple = (tool, sig, result_hash)
    guard.window.append(triple)
    count = guard.window.count(triple)
    if count < window_size or guard.aborted:
        return None
    guard.aborted = True
    return Detection(
        level="critical",
        detector="compaction_loop_persisted",
        count=count,
        warning_key=f"compaction:{tool}:{sig}:{result_hash}",
        tool_name=tool,
        message=messages.compaction_loop(tool, count, window_size),
        emitted=True,
        action="abort",
    )
