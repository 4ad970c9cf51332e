"""The text a runner shows the model for a verdict, built from its structured fields.

A verdict's ``message`` is whatever the record says: whoever can write the
control topic could put instructions there ("SYSTEM: ignore your previous
instructions ..."), and the model would read them as a tool result. So the
runner never shows it, nor hands it on: a worker's verdict reaches gates, callbacks,
``run.verdicts()`` and ``run.aborted`` with this text as its ``message``. It fills the detector's fixed template
(:mod:`loopwarden.detection.messages`, OpenClaw's own wording, so an honest
verdict reads as the worker's message; under the ``openclaw-latest`` profile
a runner deciding locally words the generic and global-breaker blocks as the
release does, adds its bounded-recovery texts and its warning note, and an
``argument_churn`` warning omits the variant count, which the verdict
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


# The OpenClaw release's own words for its runner-side behaviour (openclaw@2026.9.6, RULES.md L9), filled
# only with fields: the verdict text above and a bounded count.
RELEASE_WARNING_NOTE = (
    "[System note: Tool-loop warning after {count} repeated calls. "
    "Change your approach or stop if you are not making progress.]"
)
RECOVERY_TRIGGER = (
    "{reason}\n\nDo not repeat this exact tool action. Reassess the task. You may answer the user, "
    "ask for clarification, or continue with a different tool or different arguments."
)
RECOVERY_SIBLING = (
    "This tool was not executed because another call in the batch triggered critical tool-loop recovery. "
    "Reassess the task before choosing the next action."
)
RECOVERY_TERMINAL_TRIGGER = (
    "{reason}\n\nCritical tool-loop recovery failed because another critical loop was detected. "
    "This run is stopping now."
)
RECOVERY_TERMINAL_SIBLING = (
    "This tool was not executed because another call in the batch repeated a critical tool loop. "
    "This run is stopping now."
)
RECOVERY_STOPPED = (
    "OpenClaw stopped this run because tool-loop recovery encountered another critical loop. "
    "No blocked tool action was executed."
)


def release_warning_note(count: object) -> str:
    """The note the release appends to a warned call's result."""
    return RELEASE_WARNING_NOTE.format(count=safe_count(count))


def recovery_text(reason: str | None, trigger: bool, terminal: bool) -> str:
    """A refused batch call's result under bounded recovery: the trigger's reason and advice, or the sibling's."""
    if trigger:
        return (RECOVERY_TERMINAL_TRIGGER if terminal else RECOVERY_TRIGGER).format(reason=reason or BLOCKED)
    return RECOVERY_TERMINAL_SIBLING if terminal else RECOVERY_SIBLING


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


def verdict_text(verdict: Verdict, own_tool: str | None = None, release: bool = False) -> str:
    """The model-facing text of a ``warn``, ``block`` or ``abort`` verdict (never its ``message``);
    empty for an ``allow``.

    ``own_tool``: the tool name of the runner's own call that the verdict answers, used instead of
    the record's (normalized as the worker does, so an honest verdict reads the same). ``release``:
    the run is under the openclaw-latest profile, whose generic and global-breaker blocks the
    release words its own way."""
    if verdict.action == "allow":
        return ""  # an allow tells the model nothing (and must never read "blocked")
    detector, critical = verdict.detector, verdict.level == "critical"
    name = normalize_tool_name(own_tool) if own_tool is not None else verdict.tool_name
    tool, n = safe_name(name), safe_count(verdict.count)
    if release and critical and detector == "generic_repeat":
        return messages.generic_critical_latest(tool, n)
    if release and detector == "global_circuit_breaker":
        return messages.global_breaker_latest(tool, n)
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
