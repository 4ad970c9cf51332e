"""The tool result a runner hands the model instead of running a blocked call.

OpenClaw recognises its own veto by ``details.status == "blocked"`` and
``details.deniedReason == "tool-loop"`` (streams/detection/RULES.md §4.4, §9.3): such
a result is not hashed, so publishing it as the call's ``tool_result`` feeds
neither the history nor the post-compaction guard.
"""

from __future__ import annotations

from typing import Any

import msgspec

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


def as_shown(raw: msgspec.Raw) -> msgspec.Raw | str:
    """A framework's or host's tool result (encoded) as OpenClaw's rules should see it. They hash an
    object by its ``details`` and its ``content`` text (their own tools' shape) and nothing else, so
    any other object (Claude Code's Bash ``{stdout, ...}``, a Python tool's ``{"progress": 40}``) would
    be one outcome whatever it holds, and a poll whose output changes would be blocked as a loop: such
    an object goes on as its JSON text (keys sorted), which changes when what the model reads does.
    OpenClaw-shaped results (a ``content`` list or a ``details`` object) are kept as they are."""
    if not bytes(memoryview(raw)[:64]).lstrip().startswith(b"{"):
        return raw
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw
    if not isinstance(value, dict) or isinstance(value.get("content"), list) or isinstance(value.get("details"), dict):
        return raw
    return msgspec.json.encode(value, order="sorted").decode()
