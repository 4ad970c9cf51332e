"""Codex CLI's session transcript (its hook input's ``transcript_path``), read from the end.

Codex appends every model item of a session to one JSON-lines file (its "rollout"): each tool
call, the output the model is shown for it, and each finished command with its exit code. Its
hooks do not carry all of that: PostToolUse never fires for some calls (``apply_patch`` run through
the shell tool, a freeform ``apply_patch`` or an MCP call that fails), and a shell call's
``tool_response`` is the command's output without the exit code the model reads beside it.
The next hook of the session reads them back here (CODEX.md).

The file grows for the whole session, so it is read backwards in blocks and only as far as
needed, at most :data:`MAX_SCAN` bytes; a line is decoded only when a cheap byte test says it
may be one we want. Anything unreadable reads as nothing (the hook fails open).
"""

from __future__ import annotations

import json
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

MAX_SCAN = 8 << 20  # bytes of a transcript read back at most for the previous turn's outputs
MAX_SCAN_EXIT = 1 << 20  # ... for a shell call's exit code (written just before its PostToolUse)
BLOCK = 64 << 10
MAX_RECOVERED = 64  # outputs of one model turn read back at most
_OUTPUTS = ("function_call_output", "custom_tool_call_output")
_CALLS = ("function_call", "custom_tool_call", "local_shell_call")


def lines_backwards(path: object, max_bytes: int = MAX_SCAN) -> Iterator[bytes]:
    """The file's complete lines, last first, within its last ``max_bytes`` bytes."""
    if not isinstance(path, str) or not path:
        return
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return  # a FIFO would block the open, a device never end
        f = open(path, "rb")  # noqa: SIM115 - closed below, also when the caller stops early
    except (OSError, ValueError):
        return
    try:
        end = f.seek(0, os.SEEK_END)
        floor = max(0, end - max_bytes)
        carry = b""  # the start of a line that began in a block not read yet
        while end > floor:
            start = max(floor, end - BLOCK)
            f.seek(start)
            parts = (f.read(end - start) + carry).split(b"\n")
            end = start
            carry = parts.pop(0) if start > floor else b""
            for line in reversed(parts):
                if line.strip():
                    yield line
    except OSError:
        return
    finally:
        f.close()


def _item(line: bytes) -> dict | None:
    """A ``response_item``'s payload (what the model sent or was shown), else None."""
    if b'"type":"response_item"' not in line[:200]:
        return None
    try:
        payload = json.loads(line).get("payload")
    except (ValueError, AttributeError):
        return None
    return payload if isinstance(payload, dict) else None


def previous_outputs(path: object) -> list[tuple[str, object]]:
    """``(call id, output)`` of the tool calls the model saw the outputs of last: the outputs just
    before the model's latest items (its next calls or its answer), oldest first. Read at a
    PreToolUse or Stop, they are the outcomes of the turn before; a call PostToolUse already
    reported is among them too (the service records an outcome only once: ``pending_only``)."""
    found: list[tuple[str, object]] = []
    for line in lines_backwards(path):
        item = _item(line)
        if item is None:
            continue
        kind = item.get("type")
        if kind in _OUTPUTS:
            call_id = item.get("call_id")
            if isinstance(call_id, str) and call_id:
                found.append((call_id, item.get("output")))
                if len(found) >= MAX_RECOVERED:
                    break
        elif found:
            break  # the calls these outputs answer: the turn before is complete
    found.reverse()
    return found


def exit_code(path: object, call_id: str | None) -> int | None:
    """The exit code of the shell call ``call_id`` (its ``item_completed`` event, written before
    the PostToolUse hook runs), or None when the transcript does not have it."""
    if not call_id:
        return None
    needle = json.dumps(call_id).encode()
    for line in lines_backwards(path, MAX_SCAN_EXIT):
        if needle not in line:
            continue
        if b'"item_completed"' in line[:200]:
            try:
                item = json.loads(line)["payload"]["item"]
            except (ValueError, KeyError, TypeError):
                return None
            code = item.get("exit_code") if isinstance(item, dict) and item.get("id") == call_id else None
            return code if type(code) is int else None
        item = _item(line)
        if item is not None and item.get("type") in _CALLS:
            return None  # the call itself: nothing of it is older
    return None
