"""The ``loopwarden`` command: one sub-command per module.

Each module in :data:`COMMANDS` exposes ``register(subparsers)`` and imports
its heavy dependencies (Faust, aiokafka) only inside the function it runs,
so ``loopwarden replay`` starts without loading either.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = (
    "streams.replay",
    "streams.bench",
    "streams.worker",
    "streams.simulate",
    "streams.dev",
    "streams.bench_worker",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopwarden",
        description="Fleet-wide tool-call loop detection for AI agents (OpenClaw tools.loopDetection).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
