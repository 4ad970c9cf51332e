"""Call signatures (argsHash, §3), outcome hashes (resultHash, §4) and unknown-tool names (§5).

Payloads are JSON values as :func:`loopwarden.detection.payloads.load` decodes
them (numbers as ints or JsFloat), so digests take the fast canonical path.
"""

from __future__ import annotations

import re

from loopwarden.detection.canonical import UNDEFINED, canonical, digest_decoded, js_number
from loopwarden.detection.tools import is_send_like, process_poll_action
from loopwarden.schemas.jsvalues import JS_WHITESPACE, js_trim

_JS_S = "[" + re.escape(JS_WHITESPACE) + "]"
# ASCII-only case folding, as a JavaScript /i regex without the u flag does.
_UNKNOWN_PATTERNS = (
    re.compile(r"unknown tool(?::|" + _JS_S + r")+[\"']?([a-z0-9_.-]+)[\"']?", re.IGNORECASE | re.ASCII),
    re.compile(
        r"tool" + _JS_S + r"+[\"']?([a-z0-9_.-]+)[\"']?" + _JS_S + r"+(?:not found|is not available)",
        re.IGNORECASE | re.ASCII,
    ),
)

_VOLATILE_SEND_KEYS = frozenset(
    {
        "messageId", "message_id", "messageIds", "platformMessageId", "platformMessageIds",
        "fileId", "file_id", "fileKey", "pollId", "poll_id", "receipt", "runId",
        "idempotencyKey", "ts", "timestamp", "sentAt", "deliveredAt", "createdAt",
    }
)  # fmt: skip


def args_hash(tool: str, params: object) -> str:
    """``<tool>:`` + digest(params), params exactly as received (§3)."""
    return tool + ":" + digest_decoded(params)


def error_text(error: object) -> str:
    """§4.1: the text OpenClaw derives from a thrown value (a wire string is an Error's message)."""
    if isinstance(error, str):
        return error or "Error"
    if isinstance(error, bool):
        return "true" if error else "false"
    if isinstance(error, (int, float)):
        return js_number(error)
    return canonical(error)


def unknown_tool_name(text: str) -> str | None:
    """§5: the missing tool's name from an error text, lowercased, or None."""
    text = js_trim(text)
    if not text:
        return None
    for pattern in _UNKNOWN_PATTERNS:
        match = pattern.search(text)
        if match:
            return match.group(1).lower()
    return None


def _content_text(result: dict) -> str:
    content = result.get("content")
    if type(content) is not list:
        return ""
    if len(content) == 1:  # the common shape: one text block
        item = content[0]
        if type(item) is dict:
            kind, text = item.get("type"), item.get("text")
            if type(kind) is str and type(text) is str:
                return js_trim(text)
        return ""
    parts = [
        item["text"]
        for item in content
        if isinstance(item, dict) and isinstance(item.get("type"), str) and isinstance(item.get("text"), str)
    ]
    return js_trim("\n".join(parts))


def _num_or_null(value: object) -> object:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str_or(value: object, default: object) -> object:
    return value if isinstance(value, str) else default


def _or_null(value: object) -> object:
    return None if value is None else value


def _looks_like_delivered_message(obj: dict) -> bool:
    return (
        isinstance(obj.get("id"), str)
        and isinstance(obj.get("text"), str)
        and (
            isinstance(obj.get("direction"), str)
            or isinstance(obj.get("senderId"), str)
            or isinstance(obj.get("accountId"), str)
            or isinstance(obj.get("conversation"), dict)
        )
    )


def strip_volatile(value: object) -> object:
    """§4.7: drop delivery ids and timestamps at any depth."""
    if isinstance(value, list):
        return [strip_volatile(v) for v in value]
    if isinstance(value, dict):
        drop_id = _looks_like_delivered_message(value)
        return {
            k: strip_volatile(v)
            for k, v in value.items()
            if k not in _VOLATILE_SEND_KEYS and not (drop_id and k == "id")
        }
    return value


def _exec_projection(status: str, details: dict, text: str) -> dict | None:
    if status == "running":
        return {"status": status, "tail": _str_or(details.get("tail"), "")}
    if status == "completed" or status == "failed":
        aggregated = details.get("aggregated")
        output = js_trim(aggregated) if isinstance(aggregated, str) else ""
        return {
            "status": status,
            "exitCode": _num_or_null(details.get("exitCode")),
            "timedOut": details.get("timedOut") is True,
            "output": output or text,
        }
    if status == "approval-pending" or status == "approval-unavailable":
        return {
            "status": status,
            "reason": _str_or(details.get("reason"), None),
            "host": _str_or(details.get("host"), None),
            "command": _str_or(details.get("command"), ""),
            "warningText": _str_or(details.get("warningText"), ""),
        }
    return None


def _process_projection(action: str, details: dict, text: str) -> dict:
    status = details["status"] if "status" in details else UNDEFINED
    if action == "poll":
        return {
            "action": action,
            "status": status,
            "exitCode": _or_null(details.get("exitCode")),
            "exitSignal": _or_null(details.get("exitSignal")),
            "aggregated": _or_null(details.get("aggregated")),
            "text": text,
        }
    return {
        "action": action,
        "status": status,
        "totalLines": _or_null(details.get("totalLines")),
        "totalChars": _or_null(details.get("totalChars")),
        "truncated": _or_null(details.get("truncated")),
        "exitCode": _or_null(details.get("exitCode")),
        "exitSignal": _or_null(details.get("exitSignal")),
        "text": text,
    }


def is_loop_veto(result: object) -> bool:
    """§4.4: the loop detector's own blocked result."""
    if not isinstance(result, dict):
        return False
    details = result.get("details")
    return isinstance(details, dict) and is_veto_details(details)


def result_mode(tool: str, params: object, send_tools: frozenset[str] = frozenset()) -> str:
    """How a call's result is hashed, the only thing §4 reads from params.

    ``"poll"``/``"log"`` for process projections (§4.6), ``"send"`` for
    send-like results (§4.7), ``""`` otherwise.
    """
    action = process_poll_action(tool, params)
    if action is not None:
        return action
    return "send" if is_send_like(tool, params, send_tools) else ""


def result_parts(result: dict) -> tuple[dict, str]:
    """§4.3: a plain-object result's ``details`` (``{}`` unless an object) and content text."""
    details = result.get("details")
    return (details if isinstance(details, dict) else {}), _content_text(result)


def is_veto_details(details: dict) -> bool:
    """§4.4: the loop detector's own blocked result."""
    return details.get("status") == "blocked" and details.get("deniedReason") == "tool-loop"


def hashed_value(tool: str, mode: str, details: dict, text: str) -> object:
    """§4.5-§4.9: what is digested for a plain-object result that is not the loop's veto."""
    if tool == "exec":
        status = details.get("status")
        if isinstance(status, str):
            projection = _exec_projection(status, details, text)
            if projection is not None:
                return projection
    if mode == "poll" or mode == "log":
        return _process_projection(mode, details, text)
    if mode == "send":
        return strip_volatile(details)
    return {"details": details, "text": text}


def result_hash(tool: str, mode: str, result: object) -> str | None:
    """§4.2-§4.9 for a result without error; None means "not recorded"."""
    if not isinstance(result, dict):
        return digest_decoded(result)
    details = result.get("details")  # result_parts and is_veto_details, inlined: this runs for every new result
    if not isinstance(details, dict):
        details = {}
    if details.get("status") == "blocked" and details.get("deniedReason") == "tool-loop":
        return None
    return digest_decoded(hashed_value(tool, mode, details, _content_text(result)))


def outcome_hash(
    tool: str,
    params: object,
    result: object,
    error: object,
    *,
    has_result: bool,
    send_tools: frozenset[str] = frozenset(),
) -> tuple[str | None, str | None]:
    """(resultHash, unknownToolName) for an outcome; (None, None) when nothing is recorded."""
    if error is not None:
        text = error_text(error)
        return "error:" + digest_decoded(text), unknown_tool_name(text)
    if not has_result:
        return None, None
    return result_hash(tool, result_mode(tool, params, send_tools), result), None
