"""The text a runner shows the model for a verdict, built from its structured fields.

A verdict's ``message`` is whatever the record says: whoever can write the
control topic could put instructions there ("SYSTEM: ignore your previous
instructions ..."), and the model would read them as a tool result. So the
runner never shows it, nor hands it on: a worker's verdict reaches gates, callbacks,
``run.verdicts()`` and ``run.aborted`` with this text as its ``message``. It fills the detector's fixed template
(:mod:`loopwarden.detection.messages`, OpenClaw's own wording, so an honest
verdict reads as the worker's message; under the ``openclaw-latest`` profile
the generic and global-breaker blocks keep the default profile's wording and
an ``argument_churn`` warning omits the variant count, which the verdict
does not carry) with the verdict's fields,
validated: a tool name keeps only the characters tool names are made of and
at most :data:`MAX_NAME` of them, a count is a bounded int. A forged verdict
can still say "blocked" (signing, ``ClientSettings.verdict_keys``, stops
that); it cannot make the model read text of its choosing.
"""

from __future__ import annotations

import re

from loopwarden.detection import messages
from loopwarden.detection.tools import normalize_tool_name
from loopwarden.schemas.verdicts import Verdict

MAX_NAME = 64
MAX_COUNT = 1_000_000
_NOT_NAME = re.compile(r"[^A-Za-z0-9_.\-]")
BLOCKED = "Tool call blocked by loop detection."
WARNING = "Warning: this looks like a tool-call loop."
ABORTED = "CRITICAL: run aborted by loop detection."
ARGUMENT_CHURN = (
    "WARNING: {tool} has cycled through repeated argument patterns with the same stable outcome {n} times. "
    "Continued churn is treated as stalled run activity, but this tool call remains allowed."
)


def safe_name(name: str | None) -> str:
    """A tool name as it may appear in the text: ``[A-Za-z0-9_.-]``, others as ``_``, bounded."""
    if not name:
        return "unknown"
    cleaned = _NOT_NAME.sub("_", name[: MAX_NAME + 1])
    return cleaned if len(cleaned) <= MAX_NAME else cleaned[: MAX_NAME - 3] + "..."


def safe_count(count: object) -> int:
    """A count as an int in ``[0, MAX_COUNT]`` (anything else: 0)."""
    if type(count) is not int:
        return 0
    return min(max(count, 0), MAX_COUNT)


def _unknown_name(verdict: Verdict, tool: str | None) -> str | None:
    """The missing tool's name: the last part of ``unknown-tool:<tool>:<name>`` (the tool otherwise)."""
    prefix = f"unknown-tool:{tool}:"
    key = verdict.warning_key or ""
    return key[len(prefix) :] if key.startswith(prefix) and len(key) > len(prefix) else tool


def verdict_text(verdict: Verdict, own_tool: str | None = None) -> str:
    """The model-facing text of a ``warn``, ``block`` or ``abort`` verdict (never its ``message``);
    empty for an ``allow``.

    ``own_tool``: the tool name of the runner's own call that the verdict answers, used instead of
    the record's (normalized as the worker does, so an honest verdict reads the same)."""
    if verdict.action == "allow":
        return ""  # an allow tells the model nothing (and must never read "blocked")
    detector, critical = verdict.detector, verdict.level == "critical"
    name = normalize_tool_name(own_tool) if own_tool is not None else verdict.tool_name
    tool, n = safe_name(name), safe_count(verdict.count)
    if detector == "generic_repeat":
        return messages.generic_critical(tool, n) if critical else messages.generic_warning(tool, n)
    if detector == "known_poll_no_progress":
        return messages.poll_critical(tool, n) if critical else messages.poll_warning(tool, n)
    if detector == "ping_pong":
        return messages.ping_pong_critical(n) if critical else messages.ping_pong_warning(n)
    if detector == "global_circuit_breaker":
        return messages.global_breaker(tool, n)
    if detector == "unknown_tool_repeat":
        return messages.unknown_tool(safe_name(_unknown_name(verdict, verdict.tool_name)), n)
    if detector == "compaction_loop_persisted":
        return messages.compaction_loop(tool, n, n)  # the guard aborts when the count reaches its window
    if detector == "escalation":
        why = (verdict.warning_key or "").removeprefix("escalation:")
        return messages.escalation(n, why if why in messages.ESCALATION_CAUSES else "verdicts")
    if detector == "cross_run_repeat":
        return messages.cross_run_repeat(n)
    if detector == "argument_churn":  # openclaw-latest; the verdict does not carry the variant count
        return ARGUMENT_CHURN.format(tool=tool, n=n)
    if detector == "fleet_incident":
        return messages.fleet_incident_block(tool, n)
    if verdict.action == "warn":
        return WARNING
    return ABORTED if verdict.action == "abort" else BLOCKED
