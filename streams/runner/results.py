"""The tool result a runner hands the model instead of running a blocked call.

OpenClaw recognises its own veto by ``details.status == "blocked"`` and
``details.deniedReason == "tool-loop"`` (streams/detection/RULES.md §4.4, §9.3): such
a result is not hashed, so publishing it as the call's ``tool_result`` feeds
neither the history nor the post-compaction guard.
"""

from __future__ import annotations

from typing import Any

DENIED_REASON = "tool-loop"


def blocked_tool_result(message: str) -> dict[str, Any]:
    """``{content: [{type: text, text: message}], details: {status: blocked, deniedReason: tool-loop, reason}}``."""
    return {
        "content": [{"type": "text", "text": message}],
        "details": {"status": "blocked", "deniedReason": DENIED_REASON, "reason": message},
    }


def is_blocked_result(result: Any) -> bool:
    """True for a result built by :func:`blocked_tool_result` (or OpenClaw's own veto)."""
    details = result.get("details") if isinstance(result, dict) else None
    return (
        isinstance(details, dict)
        and details.get("status") == "blocked"
        and details.get("deniedReason") == DENIED_REASON
    )
