"""What one hook invocation asks the service and answers the host, without I/O (a generator).

:func:`exchange` yields each request ``(path, body)`` of the service's contract, is sent its
answer (a dict, or None when the service did not answer: fail open) and returns the host's
output (None: print nothing). ``loopwarden hook`` drives it over HTTP (:func:`drive`); the
service's own Claude Code endpoint drives it in-process, so both answer alike.
"""

from __future__ import annotations

import json

from loopwarden.hooks.hosts import COMPACT, POST, PRE, PROMPT, STOP, HookEvent, Host, digest_form
from loopwarden.hooks.service import VERDICT_TEXT

TYPE_CHECKING = False  # typing itself is not imported: the hook path loads only what it runs
if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    Exchange = Generator[tuple[str, dict], "dict | None", "dict | None"]

MAX_MESSAGE = 4000  # characters of verdict text handed to a model
MAX_RESULT = 64 << 10  # characters of a tool's result (or error) sent as is; larger ones are sent as a digest
MAX_PARAMS = 128 << 10  # characters of a call's params sent as is (with a result, at most 768 KiB of UTF-8:
# the service takes 1 MiB per request)
MAX_DEPTH = 63  # nesting of params or a result sent as is (the service refuses a body nested past 64)

Request = tuple[str, dict]


def _message(decision: dict, fallback: str) -> str:
    text = decision.get("message")
    return text[:MAX_MESSAGE] if isinstance(text, str) and text else fallback


def digest(text: str) -> str:
    """The stand-in for a text too large (or too deep, or not UTF-8) to send: a *string*, so the
    rules hash it as a value (RULES.md §4.2) and unequal texts stay unequal. A plain object would be
    hashed on its ``details``/``content`` alone, alike for every digest. The OpenClaw plugin writes
    the same form. Lone surrogates are hashed as they are (``surrogatepass``), never replaced."""
    import hashlib

    return digest_form(hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(), len(text))


def _deeper(value: object, limit: int) -> bool:
    """True when ``value`` nests arrays/objects more than ``limit`` deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def bounded(value: object, max_chars: int = MAX_RESULT) -> object:
    """``value`` as is, or its :func:`digest` when it is larger than ``max_chars`` as text, nested
    deeper than the service takes, or not encodable as UTF-8 (a lone surrogate): the call is still
    decided, and equal values give equal digests."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        text = value
    elif _deeper(value, MAX_DEPTH):
        return digest(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))
    else:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > max_chars:
        return digest(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return digest(text)
    return value


_JSON_TOKEN = None  # compiled on first use: the common path never needs it


def flatten_deep(raw: bytes, limit: int = MAX_DEPTH + 1) -> str:
    """Hook input JSON with every array/object nested past ``limit`` replaced by the :func:`digest`
    of its text, for input too deep for the ``json`` module (it recurses, and raises
    ``RecursionError`` about 1,000 deep). One pass over the text; equal input, equal output."""
    import re

    global _JSON_TOKEN
    if _JSON_TOKEN is None:
        _JSON_TOKEN = re.compile(r'\\.|["\[\]{}]', re.DOTALL)
    text = raw.decode("utf-8")
    out, pos, depth, start, in_string = [], 0, 0, 0, False
    for m in _JSON_TOKEN.finditer(text):
        token = m.group()
        if token[0] == "\\":
            continue
        if token == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif token in "[{":
            depth += 1
            if depth == limit + 1:
                start = m.start()
        else:
            if depth == limit + 1:
                out += [text[pos:start], json.dumps(digest(text[start : m.end()]))]
                pos = m.end()
            depth -= 1
    return "".join(out) + text[pos:]


_DONE = {"warn": "warned the agent about", "block": "blocked", "abort": "ended the session at"}


def _tell_user(host: Host, out: dict | None, ev: HookEvent, action: str, decision: dict) -> dict | None:
    """``out`` with one line for the person at the keyboard where the host has a field for it,
    built from the verdict's fields and the host's own tool name (never the service's free text)."""
    if out is None or host.user_field is None:
        return out
    detector, count = decision.get("detector"), decision.get("count")
    why = [detector if isinstance(detector, str) and detector.isidentifier() else "loop detection"]
    if isinstance(count, int) and not isinstance(count, bool):
        why.append(f"count {count}")
    tool = (ev.tool_name or "a tool")[:64]
    line = f"loopwarden {_DONE.get(action, action)} a {tool} call ({', '.join(why)})"
    return out | {host.user_field: line}


def exchange(host: Host, agent_id: str, data: dict) -> Exchange:
    """The requests for one hook input ``data`` of ``host``, then the host's output."""
    ev = host.parse(data)
    base = {"agent_id": agent_id, "session_id": ev.session_id}
    for call_id, output in host.recovered(ev):  # outcomes no post-call hook reported (CODEX.md)
        late = {"run_id": ev.run_id, "tool_call_id": call_id, "result": bounded(output), "pending_only": True}
        yield "/v1/result", base | late
    if ev.kind == PRE:
        return (yield from _pre(host, ev, base))
    if ev.kind == POST:
        return (yield from _post(host, ev, base))
    if ev.kind == PROMPT:
        yield "/v1/run_start", base | ({"run_id": ev.run_id} if ev.run_id else {})
        return host.prompt_answer()
    if ev.kind == STOP:
        yield "/v1/run_end", base | {"run_id": ev.run_id}
    elif ev.kind == COMPACT:
        yield "/v1/compaction", base | {"run_id": ev.run_id, "reason": ev.reason}
    return None


def _pre(host: Host, ev: HookEvent, base: dict) -> Exchange:
    params = bounded(ev.params, MAX_PARAMS)
    call = base | {"run_id": ev.run_id, "tool_name": ev.tool_name or "unknown", "params": params}
    d = yield "/v1/check", call | {"tool_call_id": ev.call_id}
    action = d.get("action") if d else None
    if d is None or action == "allow":
        return None
    run_id, call_id = d.get("run_id") or ev.run_id, d.get("tool_call_id") or ev.call_id
    if action == "warn":
        if not host.warns_before:
            return None  # handed over with the call's result (post)
        out = _tell_user(host, host.context(ev, _message(d, "Tool-loop warning.")), ev, action, d)
        yield from _ack(base, run_id, d)
        return out
    if action in ("block", "abort"):
        message = _message(d, VERDICT_TEXT["block"] + ".")
        out = host.abort(ev, message) if action == "abort" else host.deny(ev, message)
        out = _tell_user(host, out, ev, action, d)
        # the call will not run and the model reads the veto: the service acks the block/abort as applied
        yield "/v1/result", call | {"run_id": run_id, "tool_call_id": call_id, "blocked": True}
        return out
    return None


def _post(host: Host, ev: HookEvent, base: dict) -> Exchange:
    body = base | {"run_id": ev.run_id, "tool_call_id": ev.call_id, "tool_name": ev.tool_name}
    body["params"] = bounded(ev.params, MAX_PARAMS)
    if ev.error is not None:
        body["error"] = bounded(ev.error)
    else:
        body["result"] = bounded(ev.result)
    answer = yield "/v1/result", body
    abort = answer.get("abort") if answer else None
    if isinstance(abort, dict):  # the run is aborted: end the session where the host allows it here
        out = _tell_user(host, host.abort(ev, _message(abort, "Run aborted by loop detection.")), ev, "abort", abort)
        if out is not None:
            yield from _ack(base, abort.get("run_id") or ev.run_id, abort)
        return out
    warning = answer.get("warning") if answer else None
    if host.warns_before or not isinstance(warning, dict):
        return None
    out = _tell_user(host, host.context(ev, _message(warning, "Tool-loop warning.")), ev, "warn", warning)
    if out is not None:
        yield from _ack(base, warning.get("run_id") or ev.run_id, warning)
    return out


def _ack(base: dict, run_id: str | None, decision: dict) -> Exchange:
    if decision.get("verdict_id"):
        yield "/v1/ack", base | {"run_id": run_id, "verdict_id": decision["verdict_id"], "outcome": "applied"}
    return None


def drive(ex: Exchange, ask: Callable[[str, dict], dict | None]) -> dict | None:
    """Run ``ex`` with a synchronous ``ask(path, body)``."""
    try:
        request = next(ex)
        while True:
            request = ex.send(ask(*request))
    except StopIteration as stop:
        return stop.value
