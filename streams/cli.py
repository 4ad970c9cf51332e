"""The ``loopwarden`` command: an explicit table of sub-commands.

Each module in :data:`COMMANDS` exposes ``register(subparsers)`` and imports
its heavy dependencies (Faust, aiokafka, rich) only inside the function it
runs, so ``loopwarden replay`` starts without loading them and a runner-only
install (no worker extra) still has a working ``loopwarden replay``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = (
    ("replay", "loopwarden.replay"),
    ("config", "loopwarden.config_command"),
    ("tune", "loopwarden.tune"),
    ("worker", "loopwarden.worker.command"),
    ("spans", "loopwarden.otel.command"),
    ("simulate", "loopwarden.devtools.simulate"),
    ("dev", "loopwarden.devtools.dev"),
    ("bench", "loopwarden.bench.command"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopwarden",
        description="Fleet-wide tool-call loop detection for AI agents (OpenClaw tools.loopDetection).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for _name, module in COMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
