"""``loopwarden hook HOST``: one hook invocation, answered from the local decision service.

Reads the host's hook JSON on stdin, asks the service (``/v1/check`` before a call,
``/v1/result`` after it, ``/v1/run_start`` on a new prompt, ``/v1/run_end`` when the agent
stops, ``/v1/compaction`` before a compaction) and prints the host's answer. It fails
open: when the service is down, slow or answers nonsense, or the input is not JSON, the
hook prints nothing (the host's "allow"), writes one line on stderr and exits 0.

The argument parsing of the hot path is by hand (no argparse): the host starts this
process twice per tool call (HOOKS.md, "Cost").
"""

from __future__ import annotations

import json
import os
import sys

from loopwarden.hooks.hosts import COMPACT, HOSTS, POST, PRE, PROMPT, STOP, HookEvent, Host
from loopwarden.hooks.service import Service, read_token

MAX_INPUT = 4 << 20  # bytes of hook JSON read at most
MAX_MESSAGE = 4000  # characters of verdict text handed to a model
MAX_RESULT = 64 << 10  # bytes of a tool's result sent as is; larger ones are sent as a digest
USAGE = """usage: loopwarden hook {claude-code,codex,gemini,cursor} [--agent-id ID] [--url URL]
                       [--token-file FILE] [--timeout S]
       loopwarden hook install {claude-code,codex,gemini,cursor} [--print] [--dir DIR] [--http] [...]

Answers one hook of a coding agent from the local decision service (`loopwarden sidecar`).
Environment: LOOPWARDEN_AGENT_ID (default: the host's name), LOOPWARDEN_SIDECAR_URL
(default http://127.0.0.1:7766, or unix:/path), LOOPWARDEN_SIDECAR_TOKEN_FILE,
LOOPWARDEN_HOOK_TIMEOUT (seconds per request, default 1)."""


class Options:
    def __init__(self, host: Host) -> None:
        env = os.environ
        self.host = host
        self.agent_id = env.get("LOOPWARDEN_AGENT_ID") or host.name
        self.url = env.get("LOOPWARDEN_SIDECAR_URL")
        self.token_file = env.get("LOOPWARDEN_SIDECAR_TOKEN_FILE")
        timeout = env.get("LOOPWARDEN_HOOK_TIMEOUT")
        self.timeout = float(timeout) if timeout else None


def parse_args(argv: list[str]) -> Options:
    """``HOST [--agent-id ID] [--url URL] [--token-file FILE] [--timeout S]``; raises ValueError."""
    if not argv or argv[0] not in HOSTS:
        raise ValueError(f"the host is one of {', '.join(HOSTS)}")
    opts = Options(HOSTS[argv[0]])
    flags = {"--agent-id": "agent_id", "--url": "url", "--token-file": "token_file", "--timeout": "timeout"}
    rest = argv[1:]
    while rest:
        flag, _, value = rest[0].partition("=")
        if flag not in flags:
            raise ValueError(f"unknown argument {rest[0]!r}")
        if not _:
            if len(rest) < 2:
                raise ValueError(f"{flag} needs a value")
            value, rest = rest[1], rest[2:]
        else:
            rest = rest[1:]
        setattr(opts, flags[flag], float(value) if flag == "--timeout" else value)
    return opts


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


class Hook:
    """One invocation: the event, the service, and the answer for the host (None: print nothing)."""

    def __init__(self, opts: Options, service: Service) -> None:
        self.opts = opts
        self.host = opts.host
        self.service = service
        self.failed_open = False

    def base(self, ev: HookEvent) -> dict:
        return {"agent_id": self.opts.agent_id, "session_id": ev.session_id}

    def ask(self, path: str, body: dict) -> dict | None:
        answer = self.service.post(path, body)
        if answer is None:
            self.failed_open = True
        return answer

    def answer(self, data: dict) -> dict | None:
        ev = self.host.parse(data)
        if ev.kind == PRE:
            return self.pre(ev)
        if ev.kind == POST:
            return self.post(ev)
        if ev.kind == PROMPT:
            body = self.base(ev)
            if ev.run_id:
                body["run_id"] = ev.run_id
            self.ask("/v1/run_start", body)
            return self.host.prompt_answer()
        if ev.kind == STOP:
            self.ask("/v1/run_end", self.base(ev) | {"run_id": ev.run_id})
        elif ev.kind == COMPACT:
            self.ask("/v1/compaction", self.base(ev) | {"run_id": ev.run_id, "reason": ev.reason})
        return None

    def pre(self, ev: HookEvent) -> dict | None:
        call = self.base(ev) | {"run_id": ev.run_id, "tool_name": ev.tool_name or "unknown", "params": ev.params}
        d = self.ask("/v1/check", call | {"tool_call_id": ev.call_id})
        action = d.get("action") if d else None
        if d is None or action == "allow":
            return None
        run_id, call_id = d.get("run_id") or ev.run_id, d.get("tool_call_id") or ev.call_id
        if action == "warn":
            if not self.host.warns_before:
                return None  # handed over with the call's result (post)
            out = self.host.context(ev, _message(d, "Tool-loop warning."))
            self.ack(ev, run_id, d)
            return out
        if action in ("block", "abort"):
            message = _message(d, "Tool call blocked by loop detection.")
            out = self.host.abort(ev, message) if action == "abort" else self.host.deny(ev, message)
            # the call will not run and the model reads the veto: the service acks the block/abort as applied
            self.ask("/v1/result", call | {"run_id": run_id, "tool_call_id": call_id, "blocked": True})
            return out
        return None

    def post(self, ev: HookEvent) -> dict | None:
        body = self.base(ev) | {"run_id": ev.run_id, "tool_call_id": ev.call_id, "tool_name": ev.tool_name}
        body["params"] = ev.params
        if ev.error is not None:
            body["error"] = _bounded(ev.error)
        else:
            body["result"] = _bounded(ev.result)
        answer = self.ask("/v1/result", body)
        warning = answer.get("warning") if answer else None
        if self.host.warns_before or not isinstance(warning, dict):
            return None
        out = self.host.context(ev, _message(warning, "Tool-loop warning."))
        if out is not None:
            self.ack(ev, warning.get("run_id") or ev.run_id, warning)
        return out

    def ack(self, ev: HookEvent, run_id: str | None, decision: dict) -> None:
        if decision.get("verdict_id"):
            body = self.base(ev) | {"run_id": run_id, "verdict_id": decision["verdict_id"], "outcome": "applied"}
            self.ask("/v1/ack", body)


def run_hook(argv: list[str], stdin: bytes) -> tuple[str, str]:
    """(stdout, stderr) of one hook invocation; never raises."""
    try:
        opts = parse_args(argv)
    except ValueError as exc:
        return "", f"loopwarden hook: {exc}; allowing\n"
    try:
        data = json.loads(stdin[:MAX_INPUT]) if len(stdin) <= MAX_INPUT else None
        if not isinstance(data, dict):
            return "", "loopwarden hook: the hook input is not a JSON object (or too large); allowing\n"
        service = Service(opts.url, read_token(opts.token_file), opts.timeout)
        hook = Hook(opts, service)
        out = hook.answer(data)
    except Exception as exc:  # a hook never breaks the agent: allow, say why
        return "", f"loopwarden hook: {type(exc).__name__}: {exc}; allowing\n"
    err = ""
    if hook.failed_open:
        err = f"loopwarden hook: the decision service at {service.url} did not answer ({service.error}); allowing\n"
    return (json.dumps(out) + "\n" if out is not None else ""), err


def main(argv: list[str]) -> int:
    if argv[:1] == ["install"]:
        from loopwarden.hooks.install import main as install_main

        return install_main(argv[1:])
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    out, err = run_hook(argv, sys.stdin.buffer.read(MAX_INPUT + 1))
    if out:
        sys.stdout.write(out)
    if err:
        sys.stderr.write(err)
    return 0


def register(sub) -> None:  # noqa: ANN001 - argparse's sub-parsers (the cli imports this only for --help)
    """``loopwarden hook ...`` in the command table; ``loopwarden.cli`` runs it without argparse."""
    p = sub.add_parser("hook", help="answer a coding agent's tool hook from the local decision service (HOOKS.md)")
    p.add_argument("args", nargs="*", help="HOST [--agent-id ID] [--url URL] ..., or install HOST [--print]")
    p.set_defaults(func=lambda args: main(list(args.args)))
