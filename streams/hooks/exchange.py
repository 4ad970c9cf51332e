"""What one hook invocation asks the service and answers the host, without I/O (a generator).

:func:`exchange` yields each request ``(path, body)`` of the service's contract, is sent its
answer (a dict, or None when the service did not answer: fail open) and returns the host's
output (None: print nothing). ``loopwarden hook`` drives it over HTTP (:func:`drive`); the
service's own Claude Code endpoint drives it in-process, so both answer alike.
"""

from __future__ import annotations

import json

from loopwarden.hooks.hosts import COMPACT, POST, PRE, PROMPT, STOP, HookEvent, Host

TYPE_CHECKING = False  # typing itself is not imported: the hook path loads only what it runs
if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    Exchange = Generator[tuple[str, dict], "dict | None", "dict | None"]

MAX_MESSAGE = 4000  # characters of verdict text handed to a model
MAX_RESULT = 64 << 10  # bytes of a tool's result sent as is; larger ones are sent as a digest

Request = tuple[str, dict]


def _message(decision: dict, fallback: str) -> str:
    text = decision.get("message")
    return text[:MAX_MESSAGE] if isinstance(text, str) and text else fallback


def _bounded(value: object) -> object:
    """A tool's result or error, or a digest of it when large (equal outputs, equal digests)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    raw = value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    if len(raw) <= MAX_RESULT:
        return value
    import hashlib

    return {"sha256": hashlib.sha256(raw.encode("utf-8", "replace")).hexdigest(), "chars": len(raw)}


def exchange(host: Host, agent_id: str, data: dict) -> Exchange:
    """The requests for one hook input ``data`` of ``host``, then the host's output."""
    ev = host.parse(data)
    base = {"agent_id": agent_id, "session_id": ev.session_id}
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
    call = base | {"run_id": ev.run_id, "tool_name": ev.tool_name or "unknown", "params": ev.params}
    d = yield "/v1/check", call | {"tool_call_id": ev.call_id}
    action = d.get("action") if d else None
    if d is None or action == "allow":
        return None
    run_id, call_id = d.get("run_id") or ev.run_id, d.get("tool_call_id") or ev.call_id
    if action == "warn":
        if not host.warns_before:
            return None  # handed over with the call's result (post)
        out = host.context(ev, _message(d, "Tool-loop warning."))
        yield from _ack(base, run_id, d)
        return out
    if action in ("block", "abort"):
        message = _message(d, "Tool call blocked by loop detection.")
        out = host.abort(ev, message) if action == "abort" else host.deny(ev, message)
        # the call will not run and the model reads the veto: the service acks the block/abort as applied
        yield "/v1/result", call | {"run_id": run_id, "tool_call_id": call_id, "blocked": True}
        return out
    return None


def _post(host: Host, ev: HookEvent, base: dict) -> Exchange:
    body = base | {"run_id": ev.run_id, "tool_call_id": ev.call_id, "tool_name": ev.tool_name}
    body["params"] = ev.params
    if ev.error is not None:
        body["error"] = _bounded(ev.error)
    else:
        body["result"] = _bounded(ev.result)
    answer = yield "/v1/result", body
    abort = answer.get("abort") if answer else None
    if isinstance(abort, dict):  # the run is aborted: end the session where the host allows it here
        out = host.abort(ev, _message(abort, "Run aborted by loop detection."))
        if out is not None:
            yield from _ack(base, abort.get("run_id") or ev.run_id, abort)
        return out
    warning = answer.get("warning") if answer else None
    if host.warns_before or not isinstance(warning, dict):
        return None
    out = host.context(ev, _message(warning, "Tool-loop warning."))
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
