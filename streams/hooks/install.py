"""``loopwarden hook install HOST [--print]``: the host's hook settings, merged into its file or printed.

Merging keeps everything else in the file (other hooks, other settings) and replaces only
loopwarden's own entries, so running it twice changes nothing. A file that is not a JSON
object is left alone (the command fails and says so) rather than rewritten.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from loopwarden.hooks.hosts import HOSTS
from loopwarden.hooks.service import service_url

HOOK_TIMEOUT = 10  # seconds the host waits for one hook run (the hook itself fails open within about 1 s)

# The host's hook events the command answers, per host (HOOKS.md has what each one does).
EVENTS = {
    "claude-code": ("UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop", "PreCompact"),
    "codex": ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop", "PreCompact"),
    "gemini": ("BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent", "PreCompress"),
    "cursor": ("beforeSubmitPrompt", "preToolUse", "postToolUse", "postToolUseFailure", "stop"),
}
TOOL_EVENTS = {"PreToolUse", "PostToolUse", "PostToolUseFailure", "BeforeTool", "AfterTool"}


def settings_file(host: str, directory: Path, user: bool) -> Path:
    """Where the host reads hook settings: the project's file, or with ``user`` the user's."""
    home = Path.home()
    if host == "claude-code":
        base = Path(os.environ.get("CLAUDE_CONFIG_DIR") or home / ".claude") if user else directory / ".claude"
        return base / "settings.json"
    if host == "codex":
        return (Path(os.environ.get("CODEX_HOME") or home / ".codex") if user else directory / ".codex") / "hooks.json"
    if host == "gemini":
        return (home if user else directory) / ".gemini" / "settings.json"
    return (home if user else directory) / ".cursor" / "hooks.json"


LAUNCHER = Path(__file__).resolve().with_name("run.py")
# what marks a hook entry as ours (earlier installs: the module, the CLI, a launcher in a clone or an install)
OUR_MARKS = (
    "loopwarden.hooks",
    "loopwarden hook ",
    "/loopwarden/hooks/run.py",
    "/streams/hooks/run.py",
    str(LAUNCHER),
    "/v1/hooks/claude-code",
)


def hook_command(host: str, args: argparse.Namespace) -> str:
    """The command line the host runs: this interpreter without ``site`` (``-S``) on the hook's
    launcher, ``hooks/run.py`` (no PATH needed; about half the start of ``-m loopwarden.hooks``)."""
    if args.command:
        argv = shlex.split(args.command) + [host]
    else:
        argv = [sys.executable, "-S", str(LAUNCHER), host]
    for flag, value in (("--agent-id", args.agent_id), ("--url", args.url), ("--token-file", args.token_file)):
        if value:
            argv += [flag, value]
    return shlex.join(argv)


TOKEN_ENV = "LOOPWARDEN_SIDECAR_TOKEN"  # what an http hook's Authorization header is filled from


def _handler(host: str, args: argparse.Namespace) -> dict[str, Any]:
    if args.http:
        url = service_url(args.url).rstrip("/")
        handler: dict[str, Any] = {"type": "http", "url": f"{url}/v1/hooks/claude-code", "timeout": HOOK_TIMEOUT}
        headers = {"X-Loopwarden-Agent-Id": args.agent_id} if args.agent_id else {}
        if args.token_file:  # Claude Code fills $VAR in a header from its environment, never a file:
            # the token stays out of the settings file (often committed); HOOKS.md has the export line
            headers["Authorization"] = f"Bearer ${TOKEN_ENV}"
            handler["allowedEnvVars"] = [TOKEN_ENV]
        if headers:
            handler["headers"] = headers
        return handler
    handler = {"type": "command", "command": hook_command(host, args)}
    if host == "claude-code":
        handler["timeout"] = HOOK_TIMEOUT
    elif host == "gemini":
        handler |= {"name": "loopwarden", "timeout": HOOK_TIMEOUT * 1000}  # milliseconds
    return handler


def snippet(host: str, args: argparse.Namespace) -> dict[str, Any]:
    """The host's settings block: ``{"hooks": {EVENT: [...]}}`` (Cursor: ``{"version": 1, "hooks": ...}``)."""
    handler = _handler(host, args)
    hooks: dict[str, list] = {}
    for event in EVENTS[host]:
        if host == "cursor":
            hooks[event] = [{"command": handler["command"]}]
            continue
        group: dict[str, Any] = {"hooks": [handler]}
        if event in TOOL_EVENTS:
            group = {"matcher": ".*" if host == "gemini" else "*"} | group
        hooks[event] = [group]
    return {"version": 1, "hooks": hooks} if host == "cursor" else {"hooks": hooks}


def _ours(entry: Any) -> bool:
    """A hook entry (or group) that loopwarden installed."""
    text = json.dumps(entry)
    return any(mark in text for mark in OUR_MARKS)


def merge(current: dict[str, Any], block: dict[str, Any]) -> dict[str, Any]:
    """``current`` with loopwarden's entries replaced by ``block``'s; everything else kept, in order."""
    merged = dict(current)
    hooks = dict(merged.get("hooks") or {})
    for event, groups in block["hooks"].items():
        kept = []
        for group in hooks.get(event) or []:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                inner = [h for h in group["hooks"] if not _ours(h)]
                if inner:
                    kept.append(group | {"hooks": inner})
            elif not _ours(group):
                kept.append(group)
        hooks[event] = kept + groups
    merged["hooks"] = hooks
    for key, value in block.items():
        if key != "hooks":
            merged.setdefault(key, value)
    return merged


def install(host: str, path: Path, block: dict[str, Any]) -> dict[str, Any]:
    """Merge ``block`` into the JSON object at ``path`` (created if absent); atomic replace."""
    current: dict[str, Any] = {}
    if path.exists():
        text = path.read_text(encoding="utf-8")
        if text.strip():
            current = json.loads(text)  # ValueError: not JSON (comments too): refuse, never clobber
            if not isinstance(current, dict):
                raise ValueError(f"{path} is not a JSON object")
    merged = merge(current, block)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".loopwarden-tmp")
    tmp.write_text(json.dumps(merged, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return merged


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loopwarden hook install",
        description="Write (merged into the existing file) or print a coding agent's hook settings for loopwarden.",
    )
    p.add_argument("host", choices=sorted(HOSTS))
    p.add_argument("--print", action="store_true", help="print the settings block instead of writing it")
    p.add_argument("--dir", type=Path, default=Path.cwd(), help="the project folder (default: the current one)")
    p.add_argument("--user", action="store_true", help="the user's settings file instead of the project's")
    p.add_argument("--agent-id", help="the agent id the service sees (default: the host's name)")
    p.add_argument(
        "--url",
        help="the decision service, unix:/PATH or http://HOST:PORT (default: $LOOPWARDEN_SIDECAR_URL, else the "
        "service's own default socket, so neither side needs it; --http needs an http:// one)",
    )
    p.add_argument("--token-file", help="bearer token file, for a service beyond loopback")
    p.add_argument("--command", help="the hook command before HOST (default: this Python, -S, hooks/run.py)")
    p.add_argument(
        "--http",
        action="store_true",
        help="claude-code only: an http hook posting straight to the service (/v1/hooks/claude-code)",
    )
    return p


def precompile() -> int:
    """Write the bytecode of what a hook run loads (the package's ``__init__`` and ``hooks/``); how many.

    A hook run compiles any module whose bytecode is missing or stale, each time, where bytecode is
    not written (``PYTHONDONTWRITEBYTECODE``, a read-only install): a few ms per module per call.
    ``py_compile`` writes it whatever that setting; a folder it cannot write is left as it is."""
    import py_compile

    done = 0
    for source in [LAUNCHER.parent.parent / "__init__.py", *sorted(LAUNCHER.parent.glob("*.py"))]:
        try:
            py_compile.compile(str(source), doraise=True)
        except (OSError, py_compile.PyCompileError):
            continue
        done += 1
    return done


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.http and args.host != "claude-code":
        print("loopwarden hook install: --http is for claude-code only (the other hosts run commands)", file=sys.stderr)
        return 2
    if args.http and not service_url(args.url).startswith("http://"):
        print(
            "loopwarden hook install: --http needs the service's TCP URL (--url http://127.0.0.1:PORT, the service "
            "started with --port PORT); the command hook (without --http) uses the default socket",
            file=sys.stderr,
        )
        return 2
    block = snippet(args.host, args)
    if not args.http and not args.command:
        precompile()
    if args.print:
        print(json.dumps(block, indent=2))
        return 0
    path = settings_file(args.host, args.dir, args.user)
    try:
        install(args.host, path, block)
    except (ValueError, OSError) as exc:
        print(f"loopwarden hook install: {path}: {exc}; not changed", file=sys.stderr)
        return 1
    print(f"loopwarden hook install: {args.host} hooks written to {path}")
    if args.http and args.token_file and not os.environ.get(TOKEN_ENV):
        print(f'export {TOKEN_ENV}="$(cat {shlex.quote(args.token_file)})" before starting claude', file=sys.stderr)
    if args.host == "codex":
        print(
            "codex runs project hooks only in a trusted project, and asks you to trust new hooks once "
            "(or run it with --dangerously-bypass-hook-trust)",
            file=sys.stderr,
        )
    return 0
