"""``loopwarden hook install HOST [--print]``: the host's hook settings, merged into its file or printed.

Merging keeps everything else in the file (other hooks, other settings, numbers as written) and
replaces only the hooks loopwarden wrote, so running it twice changes nothing; ``hook uninstall``
takes them out again. The file keeps its mode and owner, a symlink is written through to its
target, and a file that cannot be rewritten faithfully (not a JSON object, comments, a duplicate
key, read-only) is left alone: the command says why in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import socket
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from loopwarden.hooks.hosts import HOSTS
from loopwarden.hooks.service import parse_url, service_url

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


class Number:
    """A JSON number (or a non-JSON ``NaN``/``Infinity`` a host accepted) as the user wrote it.

    ``json`` would turn ``1e400`` into ``Infinity`` (not JSON) and ``1.0e3`` into ``1000.0``; a
    settings file keeps its numbers byte for byte."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Number) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


MAX_SETTINGS = 16 << 20  # bytes of a settings file read at most (a host's settings are kilobytes)
MAX_DEPTH = 100  # nesting rewritten at most (a host's settings nest a few levels); deeper is refused


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:  # json keeps the last; which one the host reads is its own affair
            raise ValueError(f"the key {key!r} appears twice in one object")
        obj[key] = value
    return obj


def loads(text: str) -> Any:
    """The settings file's JSON, numbers kept as written (:class:`Number`); ValueError if unusable."""
    try:
        doc = json.loads(text, parse_float=Number, parse_int=Number, parse_constant=Number, object_pairs_hook=_object)
    except RecursionError:
        doc = None
    else:
        stack = [(doc, 1)]  # the depth, without recursion: merging and writing recurse
        while stack:
            value, depth = stack.pop()
            if depth > MAX_DEPTH:
                break
            if isinstance(value, (dict, list)):
                stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
        else:
            return doc
    raise ValueError(f"nested deeper than {MAX_DEPTH} levels: not rewritten")


def _string(text: str) -> str:
    out = json.dumps(text, ensure_ascii=False)
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (written as \\udXXX in the file): keep it escaped
        out = json.dumps(text)
    return out


def dumps(value: Any, indent: str = "") -> str:
    """``json.dumps(value, indent=2)``, with :class:`Number` written as its source text."""
    if isinstance(value, Number):
        return value.text
    if isinstance(value, str):
        return _string(value)
    inner = indent + "  "
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = (f"{inner}{_string(k)}: {dumps(v, inner)}" for k, v in value.items())
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[\n" + ",\n".join(f"{inner}{dumps(v, inner)}" for v in value) + f"\n{indent}]"
    return json.dumps(value)  # what the block adds: bool, None, int


def _launcher(head: list[str]) -> bool:
    """The words before HOST in a command loopwarden wrote: a hooks launcher, ``-m loopwarden.hooks``
    or ``loopwarden hook`` (earlier installs, or by hand from HOOKS.md)."""
    if not head:
        return False
    last = head[-1]
    if last == str(LAUNCHER) or last.endswith(("/loopwarden/hooks/run.py", "/streams/hooks/run.py")):
        return True
    if head[-2:] == ["-m", "loopwarden.hooks"]:
        return True
    return len(head) >= 2 and last == "hook" and os.path.basename(head[-2]) == "loopwarden"


def _hook_flags(tail: list[str]) -> bool:
    """``[--agent-id ID] [--url URL] [--token-file F] [--timeout S]`` and nothing else."""
    i = 0
    while i < len(tail):
        flag, eq, _ = tail[i].partition("=")
        if flag not in ("--agent-id", "--url", "--token-file", "--timeout"):
            return False
        i += 1 if eq else 2
    return i == len(tail)


def our_command(command: str, heads: frozenset[tuple[str, ...]] = frozenset()) -> bool:
    """A hook command that runs loopwarden's hook: LAUNCHER HOST [FLAGS], and nothing more (``heads``:
    more launchers, the ``--command`` being installed)."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    return any(
        word in HOSTS and (_launcher(argv[:i]) or tuple(argv[:i]) in heads) and _hook_flags(argv[i + 1 :])
        for i, word in enumerate(argv)
    )


def _ours(entry: Any, heads: frozenset[tuple[str, ...]]) -> bool:
    """A hook handler that loopwarden installed: its command (or ``--command``'s) or its http hook.
    A user's own hook that merely mentions loopwarden is not one."""
    if not isinstance(entry, dict):
        return False
    command, url = entry.get("command"), entry.get("url")
    if isinstance(command, str) and our_command(command, heads):
        return True
    return entry.get("type") == "http" and isinstance(url, str) and url.rstrip("/").endswith("/v1/hooks/claude-code")


def _heads(block: dict[str, Any]) -> frozenset[tuple[str, ...]]:
    """The launchers ``block`` installs: the words before HOST in its commands (``--command``'s too)."""
    found = set()
    for groups in block["hooks"].values():
        for group in groups:
            for handler in group.get("hooks", [group]):
                argv = shlex.split(handler.get("command", ""))
                found.update(tuple(argv[:i]) for i, word in enumerate(argv) if word in HOSTS)
    return frozenset(found)


def merge(current: dict[str, Any], block: dict[str, Any], *, remove: bool = False) -> dict[str, Any]:
    """``current`` with loopwarden's entries replaced by ``block``'s (with ``remove``: dropped); everything
    else kept, in order. ValueError where the file's ``hooks`` has a shape the host would not read."""
    merged = dict(current)
    hooks = merged.get("hooks")
    if hooks is None:
        hooks = {}
    if not isinstance(hooks, dict):
        raise ValueError('its "hooks" is not a JSON object')
    hooks = dict(hooks)
    heads = _heads(block)
    ours = {} if remove else block["hooks"]
    for event in [*hooks, *(e for e in ours if e not in hooks)]:  # every event: earlier installs' too
        before = hooks.get(event, [])
        if not isinstance(before, list):
            if event in ours:
                raise ValueError(f'its "hooks".{event} is not a JSON list')
            continue  # not one loopwarden writes: the user's affair
        kept = []
        for group in before:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                inner = [h for h in group["hooks"] if not _ours(h, heads)]
                if inner or not group["hooks"]:
                    kept.append(group | {"hooks": inner})
            elif not _ours(group, heads):
                kept.append(group)
        if event in ours:
            hooks[event] = kept + ours[event]
        elif kept or not before:  # the user's, even empty
            hooks[event] = kept
        else:  # an event only loopwarden used goes with its hooks
            del hooks[event]
    if remove and not hooks and "hooks" not in current:
        return merged
    merged["hooks"] = hooks
    if not remove:
        for key, value in block.items():
            if key != "hooks":
                merged.setdefault(key, value)
    return merged


def read_settings(path: Path) -> tuple[Path, str | None]:
    """The file to rewrite for ``path`` (a symlink's target: a dotfile linked from elsewhere is updated
    where it lives) and its text, None when there is none yet.

    ValueError: not a regular file, read-only, larger than :data:`MAX_SETTINGS`. Every settings file
    loopwarden rewrites (hooks here, MCP servers in ``loopwarden mcp install``) is read by this."""
    target = Path(os.path.realpath(path))
    if not os.path.lexists(target):
        return target, None
    st = target.stat()
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("not a regular file")
    if not st.st_mode & stat.S_IWUSR:
        raise ValueError(f"read-only (mode {stat.S_IMODE(st.st_mode):04o}); make it writable (chmod u+w) first")
    if st.st_size > MAX_SETTINGS:
        raise ValueError(f"larger than {MAX_SETTINGS >> 20} MiB")
    return target, target.read_text(encoding="utf-8")


def write_settings(target: Path, text: str) -> None:
    """Replace ``target`` (from :func:`read_settings`) by ``text`` atomically, keeping its mode (and owner,
    where allowed); a new file gets its folders. The one writer of the settings files loopwarden rewrites."""
    try:
        st = target.stat()
    except FileNotFoundError:
        st = None
        target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".loopwarden-tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            if st is not None:  # a 0600 file (settings hold env secrets) stays 0600
                os.fchmod(out.fileno(), stat.S_IMODE(st.st_mode))
                with contextlib.suppress(OSError):
                    os.fchown(out.fileno(), st.st_uid, st.st_gid)
            else:
                umask = os.umask(0)
                os.umask(umask)
                os.fchmod(out.fileno(), 0o666 & ~umask)  # what the host's own write would make
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def install(host: str, path: Path, block: dict[str, Any], *, remove: bool = False) -> bool:
    """Merge ``block`` into the JSON object at ``path`` (created if absent; with ``remove``, take
    loopwarden's entries out); whether the file changed. A symlink is written through to its target.

    ValueError or OSError, the file untouched: not JSON (comments too), not an object, a shape the
    host would not read, a file that is read-only or not a regular file."""
    target, old = read_settings(path)
    if old is None and remove:
        return False
    current: Any = loads(old) if old is not None and old.strip() else {}
    if not isinstance(current, dict):
        raise ValueError("not a JSON object")
    merged = merge(current, block, remove=remove)
    if old is not None and merged == current:  # nothing to do: the file stays as the user wrote it
        return False
    write_settings(target, dumps(merged) + "\n")
    return True


class OneLineParser(argparse.ArgumentParser):
    """A usage error in one line and exit 2, as in every command (``mcp install`` uses it too)."""

    def error(self, message: str):  # noqa: ANN201 - NoReturn: a usage error is one line, as in every command
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
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


def _answers(url: str) -> bool:
    """Whether something listens where the hooks will ask: a hook finding nothing allows every call and
    says so only on the host's hook stderr, which a user rarely sees, so ``install`` says it once."""
    try:
        unix, host, port, _prefix = parse_url(url)
        if unix is not None:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(1)
                sock.connect(unix)
        else:
            socket.create_connection((host, port), timeout=1).close()
    except (OSError, ValueError):
        return False
    return True


def main(argv: list[str], *, remove: bool = False) -> int:
    """``hook install`` (or with ``remove``, ``hook uninstall``): 0 done, 1 the file refused, 2 usage."""
    parser = build_parser()
    if remove:
        parser.prog, parser.description = (
            "loopwarden hook uninstall",
            "Take loopwarden's hooks out of a host's settings.",
        )
    args = parser.parse_args(argv)
    prog = parser.prog
    if args.http and args.host != "claude-code":
        print(f"{prog}: --http is for claude-code only (the other hosts run commands)", file=sys.stderr)
        return 2
    if args.http and not service_url(args.url).startswith("http://"):
        print(
            f"{prog}: --http needs the service's TCP URL (--url http://127.0.0.1:PORT, the service "
            "started with --port PORT); the command hook (without --http) uses the default socket",
            file=sys.stderr,
        )
        return 2
    block = snippet(args.host, args)
    if not args.http and not args.command and not remove:
        precompile()
    if args.print:
        print(json.dumps(block, indent=2))
        return 0
    if not args.user and not args.dir.is_dir():
        print(f"{prog}: --dir {args.dir}: no such folder (give the project's folder)", file=sys.stderr)
        return 2
    path = settings_file(args.host, args.dir, args.user)
    try:
        changed = install(args.host, path, block, remove=remove)
    except (ValueError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"{prog}: {path}: {reason}; not changed", file=sys.stderr)
        return 1
    if remove:
        print(f"{prog}: {args.host} hooks {'removed from' if changed else 'were not in'} {path}")
        return 0
    print(f"{prog}: {args.host} hooks {'written to' if changed else 'already in'} {path}")
    url = service_url(args.url)
    if not _answers(url):
        print(
            f"{prog}: no decision service listens at {url} yet: start it (loopwarden sidecar --config FILE"
            f"{', --port' if url.startswith('http') else ''}); until then the hooks allow every call",
            file=sys.stderr,
        )
    if args.http and args.token_file and not os.environ.get(TOKEN_ENV):
        print(f'export {TOKEN_ENV}="$(cat {shlex.quote(args.token_file)})" before starting claude', file=sys.stderr)
    if args.host == "codex":
        print(
            "codex runs project hooks only in a trusted project, and asks you to trust new hooks once "
            "(or run it with --dangerously-bypass-hook-trust)",
            file=sys.stderr,
        )
    return 0
