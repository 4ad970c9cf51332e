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

from loopwarden.hooks.exchange import drive, exchange, flatten_deep
from loopwarden.hooks.hosts import HOSTS, Host
from loopwarden.hooks.service import Service, read_token

MAX_INPUT = 4 << 20  # bytes of hook JSON read at most
USAGE = """usage: loopwarden hook {claude-code,codex,gemini,cursor} [--agent-id ID] [--url URL]
                       [--token-file FILE] [--timeout S]
       loopwarden hook install {claude-code,codex,gemini,cursor} [--print] [--dir DIR] [--http] [...]
       loopwarden hook uninstall {claude-code,codex,gemini,cursor} [--dir DIR] [--user]

Answers one hook of a coding agent from the local decision service (`loopwarden sidecar`).
Environment: LOOPWARDEN_AGENT_ID (default: the host's name), LOOPWARDEN_SIDECAR_URL
(default: the service's own socket, unix:~/.loopwarden/run/sidecar.sock; or
http://HOST:PORT), LOOPWARDEN_SIDECAR_TOKEN_FILE,
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


def _parse(stdin: bytes) -> object:
    """The hook input; input nested too deep for ``json`` has its deepest parts digested, so the
    call is still decided (exchange.flatten_deep)."""
    try:
        return json.loads(stdin)
    except RecursionError:
        return json.loads(flatten_deep(stdin))


def run_hook(argv: list[str], stdin: bytes) -> tuple[str, str]:
    """(stdout, stderr) of one hook invocation; never raises."""
    try:
        opts = parse_args(argv)
    except ValueError as exc:
        return "", f"loopwarden hook: {exc}; allowing\n"
    try:
        try:
            data = _parse(stdin) if len(stdin) <= MAX_INPUT else None
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past what even flattening takes
            data = None
        if not isinstance(data, dict):
            return "", "loopwarden hook: the hook input is not a JSON object (or too large); allowing\n"
        service = Service(opts.url, read_token(opts.token_file), opts.timeout)
        failed = []

        def ask(path: str, body: dict) -> dict | None:
            answer = service.post(path, body)
            if answer is None:
                failed.append(path)
            return answer

        out = drive(exchange(opts.host, opts.agent_id, data), ask)
    except Exception as exc:  # a hook never breaks the agent: allow, say why
        return "", f"loopwarden hook: {type(exc).__name__}: {exc}; allowing\n"
    err = ""
    if failed:
        err = f"loopwarden hook: the decision service at {service.url} did not answer ({service.error}); allowing\n"
    return (json.dumps(out) + "\n" if out is not None else ""), err


def main(argv: list[str]) -> int:
    if argv[:1] == ["install"]:
        from loopwarden.hooks.install import main as install_main

        return install_main(argv[1:])
    if argv[:1] == ["uninstall"]:
        from loopwarden.hooks.install import main as install_main

        return install_main(argv[1:], remove=True)
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
    p.add_argument(
        "args", nargs="*", help="HOST [--agent-id ID] [--url URL] ..., or install HOST [--print], or uninstall HOST"
    )
    p.set_defaults(func=lambda args: main(list(args.args)))
