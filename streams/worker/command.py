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


def start_line(settings: Settings, detection_on: bool) -> str:
    """The worker's first log line: what it is and what it works on."""
    from loopwarden.worker.logs import version

    s = settings
    return (
        f"loopwarden worker {version()} starting: broker {','.join(s.brokers)}, group {s.app_id}, "
        f"events {s.events_topic} -> verdicts {s.control_topic}, config {s.config or 'none'} "
        f"(+ topic {s.config_topic}), detection {'on' if detection_on else 'off'}, "
        f"http://{s.host}:{s.port}"
    )


def run_worker(settings: Settings) -> int:
    """Create topics, build the app and block until the worker stops (SIGTERM/SIGINT)."""
    from loopwarden.kafka.admin import ensure_topics
    from loopwarden.schemas.config import FleetConfig
    from loopwarden.schemas.config_check import check_file, detection_off_notice
    from loopwarden.worker.app import create_app
    from loopwarden.worker.logs import setup_logging

    setup_logging(settings.log_level)
    log = logging.getLogger("loopwarden.worker")
    fleet = FleetConfig()
    if settings.config is not None:  # the checks of `loopwarden config check`, logged at start
        fleet, report = check_file(settings.config)
        for text in report.warnings:
            logging.getLogger("loopwarden.config").warning("config %s: %s", settings.config, text)
        if fleet is None:
            print("loopwarden worker: " + "; ".join(report.errors), file=sys.stderr)
            return 2
    notice = detection_off_notice(fleet)
    log.info("%s", start_line(settings, notice is None))
    if notice:
        log.warning("%s", notice)
    created = asyncio.run(ensure_topics(settings))
    if created:
        log.debug("created topics %s", created)
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
