"""Verdict message templates, exactly as OpenClaw words them (§8.1, §10.4).

The ``*_latest`` templates and the two churn templates are the newest revision's
(the ``openclaw-latest`` profile); the others are shared by both revisions.
"""

from __future__ import annotations


def unknown_tool(name: str, n: int) -> str:
    return (
        f"CRITICAL: attempted unavailable tool {name} {n} times. Stop retrying that missing tool and answer without it."
    )


def global_breaker(tool: str, n: int) -> str:
    return (
        f"CRITICAL: {tool} has repeated identical no-progress outcomes {n} times. "
        "Session execution blocked by global circuit breaker to prevent runaway loops."
    )


def poll_critical(tool: str, n: int) -> str:
    return (
        f"CRITICAL: Called {tool} with identical arguments and no progress {n} times. "
        "This appears to be a stuck polling loop. Session execution blocked to prevent resource waste."
    )


def poll_warning(tool: str, n: int) -> str:
    return (
        f"WARNING: You have called {tool} {n} times with identical arguments and no progress. "
        "Stop polling and either (1) increase wait time between checks, or (2) report the task as failed "
        "if the process is stuck."
    )


def ping_pong_critical(n: int) -> str:
    return (
        f"CRITICAL: You are alternating between repeated tool-call patterns ({n} consecutive calls) with no "
        "progress. This appears to be a stuck ping-pong loop. Session execution blocked to prevent resource waste."
    )


def ping_pong_warning(n: int) -> str:
    return (
        f"WARNING: You are alternating between repeated tool-call patterns ({n} consecutive calls). "
        "This looks like a ping-pong loop; stop retrying and report the task as failed."
    )


def generic_critical(tool: str, n: int) -> str:
    return (
        f"CRITICAL: Called {tool} with identical arguments and identical outcomes {n} times. "
        "Session execution blocked to prevent runaway loops."
    )


def generic_warning(tool: str, n: int) -> str:
    return (
        f"WARNING: You have called {tool} {n} times with identical arguments. "
        "If this is not making progress, stop retrying and report the task as failed."
    )


def compaction_loop(tool: str, n: int, window: int) -> str:
    return (
        f"CRITICAL: tool {tool} repeated {n} times with identical arguments and identical results within "
        f"{window} attempts after auto-compaction. The compaction did not break the loop. "
        "Aborting to prevent runaway resource use."
    )


def generic_critical_latest(tool: str, n: int) -> str:
    return (
        f"CRITICAL: Called {tool} with identical outcomes {n} times. "
        "Session execution blocked to prevent runaway loops."
    )


def global_breaker_latest(tool: str, n: int) -> str:
    return (
        f"CRITICAL: {tool} repeated identical no-progress outcomes {n} times. "
        "Session execution blocked by global circuit breaker to prevent runaway loops."
    )


def argument_churn(tool: str, variants: int, n: int) -> str:
    return (
        f"WARNING: {tool} has cycled through {variants} repeated argument patterns with the same stable outcome "
        f"{n} times. Continued churn is treated as stalled run activity, but this tool call remains allowed."
    )


def write_churn(tool: str, variants: int) -> str:
    return (
        f"WARNING: {tool} has changed the same target with {variants} distinct argument variants and no "
        "intervening verification. Continued rewriting is treated as stalled run activity, but this tool call "
        "remains allowed. Read or verify the current result before rewriting it again."
    )


# loopwarden's extensions (not OpenClaw's): one wording for the worker's message and the runner's text.

ESCALATION_CAUSES = ("blocks", "verdict_violations")


def escalation(count: int, why: str) -> str:
    return (
        f"CRITICAL: run aborted by escalation after {count} {why.replace('_', ' ')}; "
        "it does not obey loop-detection verdicts."
    )


def cross_run_repeat(runs: int) -> str:
    return (
        f"WARNING: this session's last {runs} runs repeated the same tool calls with the same results; "
        "a scheduled task may be redoing work that has no effect."
    )


def fleet_incident_block(tool: str, n: int) -> str:
    """The runner's text for a ``fleet_incident`` block (the worker's message also names the incident)."""
    return (
        f"CRITICAL: a fleet incident is open: many runs get the same outcome from {tool}; "
        f"this run has had it {n} times. Call blocked; try another approach."
    )
