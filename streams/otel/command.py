"""``loopwarden spans``: feed the OpenTelemetry Collector's span topic to the worker (streams/otel/OTEL.md)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from loopwarden.otel.spans import ENCODINGS

_FLAGS = (
    ("--bootstrap", "bootstrap", "Kafka bootstrap servers (env LOOPWARDEN_SPANS_BOOTSTRAP)"),
    ("--spans-topic", "spans_topic", "the Collector's traces topic (default otlp_spans)"),
    ("--events-topic", "events_topic", "where the events go: the worker's events topic (default agent.events)"),
    ("--dead-letter-topic", "dead_letter_topic", "where unmappable spans go (default loopwarden.dead-letter)"),
    ("--group-id", "group_id", "consumer group (default loopwarden-spans)"),
)


def register(sub) -> None:
    p = sub.add_parser(
        "spans",
        help="turn OpenTelemetry tool spans (the Collector's Kafka exporter) into events for the worker",
        description="Consume the OpenTelemetry Collector's Kafka span topic, map tool spans (GenAI semantic "
        "conventions, OpenInference, OpenLLMetry) to tool_call/tool_result events keyed by run and publish "
        "them to the events topic. Their runs are decided in shadow. Every setting is also an environment "
        "variable LOOPWARDEN_SPANS_<NAME>.",
    )
    for flag, dest, text in _FLAGS:
        p.add_argument(flag, dest=dest, help=text)
    p.add_argument("--encoding", choices=ENCODINGS, help="the exporter's traces encoding (default otlp_proto)")
    p.add_argument("--start", choices=("latest", "earliest"), help="where a new consumer group starts (default latest)")
    p.add_argument("--max-request-bytes", type=int, help="larger records are dead-lettered (default 8 MiB)")
    p.add_argument("--max-spans", type=int, help="records with more spans are dead-lettered (default 20000)")
    p.add_argument(
        "--max-payload-bytes", type=int, help="larger arguments/results are sent as a digest (default 65536)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loopwarden.otel.ingest import SpanIngest, SpanSettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    fields = ("bootstrap", "spans_topic", "events_topic", "dead_letter_topic", "group_id", "encoding", "start")
    limits = ("max_request_bytes", "max_spans", "max_payload_bytes")
    overrides = {name: getattr(args, name, None) for name in fields + limits}
    try:
        settings = SpanSettings.from_env(**overrides).check()  # bad settings fail here, not in the first fetch
    except Exception as exc:  # noqa: BLE001 - a settings error is reported, not a traceback
        print(f"loopwarden spans: {exc}", file=sys.stderr)
        return 2
    ingest = SpanIngest(settings)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, ingest.stop)
        await ingest.run()

    asyncio.run(main())
    return 0
