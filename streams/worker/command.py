"""``loopwarden worker``: run the Faust worker (one process of the consumer group)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys

from loopwarden.worker.settings import Settings, add_arguments, from_sources


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "worker",
        help="run the stream worker (Faust) against a Kafka broker",
        description="Consume agent events, keep run state in a RocksDB table, publish verdicts. "
        "Every setting is a flag or a LOOPWARDEN_* environment variable (flag wins).",
    )
    add_arguments(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    settings = from_sources(args)
    return run_worker(settings)


def run_worker(settings: Settings) -> int:
    """Create topics, build the app and block until the worker stops (SIGTERM/SIGINT)."""
    from loopwarden.kafka.admin import ensure_topics
    from loopwarden.schemas.config import FleetConfig
    from loopwarden.schemas.config_check import check_file
    from loopwarden.worker.app import create_app

    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    fleet = FleetConfig()
    if settings.config is not None:  # the checks of `loopwarden config check`, logged at start
        fleet, report = check_file(settings.config)
        for text in report.warnings:
            logging.getLogger("loopwarden.config").warning("config %s: %s", settings.config, text)
        if fleet is None:
            print("loopwarden worker: " + "; ".join(report.errors), file=sys.stderr)
            return 2
    created = asyncio.run(ensure_topics(settings))
    if created:
        logging.getLogger("loopwarden").info("created topics %s", created)
    app, _rt = create_app(settings, fleet)
    # What is built by now (Faust, aiokafka, the app: ~60k objects) lives as long as the process;
    # frozen, the collector's full passes no longer walk it again and again (each such pass is a
    # pause of tens of ms that lands on some batch's verdicts).
    gc.collect()
    gc.freeze()
    worker = app.Worker(loglevel=settings.log_level.upper(), quiet=True, redirect_stdouts=False)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":  # python -m loopwarden.worker.command ...: the same command without the CLI registry
    _parser = argparse.ArgumentParser(prog="loopwarden worker")
    add_arguments(_parser)
    sys.exit(main(_parser.parse_args()))
