"""``loopwarden mcp install HOST [--name NAME] [--config FILE] -- CMD ARGS`` (or ``--url URL``).

Writes the host's MCP server entry that runs the server behind ``loopwarden mcp``, with absolute
paths (this installation's ``loopwarden``, the config file), so the host needs no PATH and no
working directory of its own. Merging keeps the rest of the file as it was: other servers and
settings, key order, numbers as written (JSON) or the whole layout (TOML, through tomlkit), the
file's mode and owner; a symlinked file is written through its link. A file that cannot be read
as its format (or is read-only, not a regular file, over 16 MiB) is left alone and the command says
so. The file is read and written by the hooks' settings reader and writer
(``loopwarden.hooks.install``), the one implementation for every settings file loopwarden rewrites.

Hosts and files (``--dir`` is the project, default the working directory; ``--user`` the user's):

- ``claude-code``: ``DIR/.mcp.json`` (``mcpServers``; ``--user``: ``~/.claude.json``);
- ``gemini``: ``DIR/.gemini/settings.json`` (``mcpServers``; ``--user``: ``~/.gemini/settings.json``);
- ``codex``: ``$CODEX_HOME/config.toml`` (``[mcp_servers.NAME]``; default ``~/.codex``; Codex reads
  MCP servers from the user's file only, so ``--dir`` names the folder that holds ``config.toml``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from loopwarden.hooks.install import OneLineParser, dumps, loads, read_settings, write_settings

HOSTS = ("claude-code", "codex", "gemini")
REPO = Path(__file__).resolve().parents[2]
CLONE_CONFIG = REPO / "deploy" / "config" / "loopwarden.json5"  # the clone's config, when run from a clone
HEADLESS_NOTE = (
    "headless Claude Code (-p) connects MCP servers in the background, so its first request may have no "
    "proxy tools: run it with MCP_CONNECTION_NONBLOCKING=false to wait for them"
)


class InstallError(Exception):
    """What the user must change, in one line."""


def loopwarden_command() -> list[str]:
    """This installation's ``loopwarden`` (the script next to the interpreter), absolute, unresolved
    (a venv's ``bin/python`` is a link out of the venv: resolving it would leave the venv)."""
    script = Path(sys.executable).absolute().with_name("loopwarden")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [str(Path(sys.executable).absolute()), "-m", "loopwarden.cli"]


def proxy_argv(args: argparse.Namespace) -> list[str]:
    """The host's command line for the proxied server."""
    config = args.config or (str(CLONE_CONFIG) if CLONE_CONFIG.is_file() else None)
    argv = [*loopwarden_command(), "mcp"]
    if config:
        path = Path(config).expanduser().absolute()
        if not path.is_file():
            raise InstallError(f"no config file at {path}; give an existing one with --config FILE")
        argv += ["--config", str(path)]
    for flag, value in (("--bootstrap", args.bootstrap), ("--agent-id", args.agent_id)):
        if value:
            argv += [flag, value]
    if args.url:
        return [*argv, "--url", args.url]
    return [*argv, "--", *args.server]


def target(host: str, args: argparse.Namespace) -> Path:
    home = Path.home()
    if host == "codex":
        base = Path(args.dir) if args.dir else Path(os.environ.get("CODEX_HOME") or home / ".codex")
        return base / "config.toml"
    directory = Path(args.dir or os.getcwd())
    if host == "claude-code":
        return home / ".claude.json" if args.user else directory / ".mcp.json"
    return (home if args.user else directory) / ".gemini" / "settings.json"


def entry(host: str, argv: list[str]) -> dict[str, Any]:
    if host == "claude-code":
        return {"type": "stdio", "command": argv[0], "args": argv[1:]}
    return {"command": argv[0], "args": argv[1:]}


def merge_json(text: str, name: str, value: dict[str, Any], path: Path) -> str:
    """``text`` with ``mcpServers[name]`` set; everything else kept, numbers as written (the hooks'
    settings reader and writer: one rule for every settings file loopwarden rewrites)."""
    try:
        current = loads(text) if text.strip() else {}
    except ValueError as exc:
        raise InstallError(f"{path} is not JSON ({exc}); fix it or add the entry by hand") from None
    if not isinstance(current, dict) or not isinstance(current.get("mcpServers", {}), dict):
        raise InstallError(f"{path}: expected a JSON object with an mcpServers object; fix it or add the entry by hand")
    servers = current.setdefault("mcpServers", {})
    servers[name] = value
    return dumps(current) + "\n"


def merge_toml(text: str, name: str, value: dict[str, Any], path: Path) -> str:
    """``text`` with ``[mcp_servers.NAME]`` set; the rest of the document as it was (tomlkit)."""
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as exc:
        raise InstallError(f"{path} is not TOML ({exc}); fix it or add the entry by hand") from None
    servers = doc.get("mcp_servers")
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        doc["mcp_servers"] = servers
    elif not isinstance(servers, dict):
        raise InstallError(f"{path}: mcp_servers is not a table; fix it or add the entry by hand")
    table = tomlkit.table()
    for key, item in value.items():
        table[key] = item
    servers[name] = table
    return tomlkit.dumps(doc)


def install(host: str, args: argparse.Namespace) -> tuple[Path, str]:
    """Merge the entry into the host's file (or only render it with ``--print``): the path and the text."""
    argv = proxy_argv(args)
    path = target(host, args)
    if args.dir and not Path(args.dir).is_dir():
        raise InstallError(f"--dir {args.dir} is not a folder; give the project's folder")
    try:
        real, text = read_settings(path)
    except ValueError as exc:
        raise InstallError(f"{path}: {exc}") from None
    merge = merge_toml if host == "codex" else merge_json
    merged = merge(text or "", args.name, entry(host, argv), path)
    if not args.print:
        write_settings(real, merged)
    return path, merged


def add_proxy_options(p: argparse.ArgumentParser, config_help: str) -> None:
    """The proxy's own options, the ones ``mcp install`` writes into the host's entry as well."""
    p.add_argument("--config", help=config_help)
    p.add_argument(
        "--bootstrap",
        help="Kafka bootstrap servers (else LOOPWARDEN_RUNNER_BOOTSTRAP; with neither, no broker is contacted)",
    )
    p.add_argument("--url", help="the wrapped server's streamable-HTTP endpoint (instead of a command)")
    p.add_argument("--agent-id", help="the agent id of every run (default: the host's clientInfo.name)")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="loopwarden mcp install",
        description="Write a host's MCP server entry that runs the server behind loopwarden mcp, with absolute "
        "paths, merged into the host's file (the rest of the file kept). The server's command follows '--'.",
    )
    p.add_argument("host", choices=HOSTS)
    p.add_argument("--name", required=True, help="the server's name in the host (Claude Code: mcp__NAME__TOOL)")
    add_proxy_options(p, config_help=f"the fleet's config (default: the clone's {CLONE_CONFIG.name}, if any)")
    p.add_argument("--dir", help="the project folder (default: the working directory; codex: the CODEX_HOME)")
    p.add_argument("--user", action="store_true", help="the user's file instead of the project's")
    p.add_argument("--print", action="store_true", help="print the merged file instead of writing it")
    return p


def main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    args = build_parser().parse_args(argv[:split])
    args.server = argv[split + 1 :]  # -- CMD ARGS: the server's command
    prog = "loopwarden mcp install"
    if bool(args.server) == bool(args.url):
        print(f"{prog}: give the server's command after '--' or its --url (one of them)", file=sys.stderr)
        return 2
    try:
        path, text = install(args.host, args)
    except (InstallError, OSError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    if args.print:
        sys.stdout.write(text)
    else:
        print(f"{prog}: wrote the {args.name!r} server into {path}", file=sys.stderr)
    if args.host == "claude-code":
        command = shlex.join(["claude", "mcp", "add", args.name, "--", *proxy_argv(args)])
        print(f"{prog}: the same with Claude Code's own command: {command}", file=sys.stderr)
        print(f"{prog}: {HEADLESS_NOTE}", file=sys.stderr)
    return 0
