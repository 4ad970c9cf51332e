"""Tool-name facts: normalization and aliases (§9.1), known polls (§7.5), send-like results (§4.7)."""

from __future__ import annotations

from functools import lru_cache

from loopwarden.schemas.jsvalues import js_trim

_ALIASES = {"bash": "exec", "apply-patch": "apply_patch"}
_POLL_ACTIONS = frozenset({"poll", "log"})
SEND_ACTIONS = frozenset(
    {"send", "broadcast", "reply", "thread-reply", "sendWithEffect", "sendAttachment", "upload-file", "sticker", "poll"}
)


@lru_cache(maxsize=4096)
def normalize_tool_name(name: str | None) -> str:
    """Trim, lowercase, apply aliases (§9.1); the name is taken as sent, lone surrogates included.

    A missing or empty name is ``tool``; the default comes before the trim
    (``normalizeToolName(name || "tool")``), so a name of only whitespace is ``""``.
    """
    normalized = js_trim(name or "tool").lower()
    return _ALIASES.get(normalized, normalized)


def is_known_poll(tool: str, params: object) -> bool:
    if tool == "command_status":
        return True
    return tool == "process" and isinstance(params, dict) and params.get("action") in _POLL_ACTIONS


def process_poll_action(tool: str, params: object) -> str | None:
    """``poll`` or ``log`` for a ``process`` call with those actions, else None."""
    if tool == "process" and isinstance(params, dict):
        action = params.get("action")
        if action == "poll" or action == "log":
            return action
    return None


def is_send_like(tool: str, params: object, send_tools: frozenset[str] = frozenset()) -> bool:
    if tool == "sessions_send" or tool in send_tools:
        return True
    if tool == "message" and isinstance(params, dict):
        action = params.get("action")
        return isinstance(action, str) and action in SEND_ACTIONS
    return False
