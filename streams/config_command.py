"""``loopwarden config check FILE``: the effective settings of a config, and what in it was ignored.

The explanation itself is :mod:`loopwarden.schemas.config_check` (pure); this is the
command around it. Exit 1 when the file cannot be used (unreadable, not
JSON/JSON5, not an object: one line on stderr, exit 2; with ``--json`` the report, exit 2) or,
with ``--strict``, exit 1 when there are warnings.
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "config",
        help="check an OpenClaw-shaped config file",
        description="Commands on OpenClaw-shaped loop-detection configs.",
    )
    sub = p.add_subparsers(dest="config_command", required=True, metavar="SUBCOMMAND")
    check = sub.add_parser(
        "check",
        help="print each agent's effective settings and every value that was replaced or ignored",
        description="Validate a config (JSON or JSON5) and print, for the global block and each agent in "
        "agents.list, the effective loop-detection settings after overlay, defaults and clamping, "
        "with a note on each value that was replaced and a warning for each unknown key. "
        "Exit 2 when the file cannot be used, 1 on warnings with --strict, 0 otherwise.",
    )
    check.add_argument("file", metavar="FILE", help="the config file; - reads standard input")
    check.add_argument("--json", action="store_true", help="print the report as one JSON object (for CI)")
    check.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    check.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import msgspec

    from loopwarden.schemas.config import ConfigError, parse_config_text
    from loopwarden.schemas.config_check import ConfigReport, check_document, check_file, format_report

    if args.file == "-":
        try:
            report = check_document(parse_config_text(sys.stdin.read(), "<stdin>"), "<stdin>")
        except ConfigError as exc:
            report = ConfigReport(source="<stdin>", errors=[str(exc)])
    else:
        _fleet, report = check_file(args.file)
    if args.json:
        out = msgspec.to_builtins(report)
        out["ok"] = report.ok
        sys.stdout.write(msgspec.json.encode(out).decode() + "\n")
    elif report.errors:  # the file cannot be used: nothing to report but why
        print(f"loopwarden config check: {'; '.join(report.errors)}", file=sys.stderr)
    else:
        print(format_report(report))
    return 2 if report.errors else 1 if args.strict and report.warnings else 0
