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
