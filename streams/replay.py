"""``loopwarden replay``: the worker's detection path over a JSONL trace, offline.

Imports neither Faust nor aiokafka, so it starts fast; it calls the same
:func:`streams.detection.step` the worker calls.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import msgspec

from schemas.config import ConfigError, FleetConfig, load_config
from schemas.events import EventDecodeError, decode_event, state_key
from schemas.verdicts import Detection
from streams.detection import RunState, step


class BadLine(NamedTuple):
    """A line that is not a valid event (reported, skipped)."""

    event_index: int
    reason: str
    detail: str


def detection_row(index: int, event, det: Detection) -> dict:
    """One replay output line, fields in wire.md order."""
    row = {
        "event_index": index,
        "run_id": event.run_id,
        "agent_id": event.agent_id,
        "session_id": event.session_id,
        "level": det.level,
        "detector": det.detector,
        "count": det.count,
        "warning_key": det.warning_key,
        "tool_name": det.tool_name,
    }
    if det.paired_tool_name is not None:
        row["paired_tool_name"] = det.paired_tool_name
    row["message"] = det.message
    row["emitted"] = det.emitted
    row["action"] = det.action
    return row


def replay_lines(lines: Iterable[str | bytes], config: FleetConfig, incidents: bool = False) -> Iterator[dict | BadLine]:
    """Yield a row per detection and a :class:`BadLine` per invalid line, in input order.

    ``incidents``: also the fleet side's records after each event (incident
    records, ``cross_run_repeat`` verdicts), each with its ``event_index``.
    """
    fleet = None
    if incidents:
        from streams.fleet.offline import FleetTrace

        fleet = FleetTrace(config)
    states: dict[tuple[str, str], RunState] = {}
    index = -1
    for line in lines:
        if not line or line.isspace():
            continue
        index += 1
        try:
            event = decode_event(line)
        except EventDecodeError as exc:
            yield BadLine(index, exc.reason, exc.detail)
            continue
        key = state_key(event)
        prior = states.get(key)
        result = (step(prior, event, config.resolve(event.agent_id)) if fleet is None
                  else fleet.step(prior, event))
        if result.state is None:
            states.pop(key, None)
        else:
            states[key] = result.state
        for det in result.detections:
            yield detection_row(index, event, det)
        if fleet is not None:
            for record in fleet.after(prior, event, result):
                yield {"event_index": index, **msgspec.to_builtins(record)}


def run(args) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"loopwarden replay: {exc}", file=sys.stderr)
        return 2
    try:
        source = open(args.events, "rb")
    except OSError as exc:
        print(f"loopwarden replay: cannot read {args.events}: {exc.strerror}", file=sys.stderr)
        return 2
    encode = msgspec.json.Encoder().encode
    out = sys.stdout.buffer
    try:
        with source:
            for item in replay_lines(source, config, incidents=getattr(args, "incidents", False)):
                if isinstance(item, BadLine):
                    print(f"event {item.event_index}: {item.reason}: {item.detail}", file=sys.stderr)
                else:
                    out.write(encode(item) + b"\n")
        out.flush()
    except BrokenPipeError:  # `loopwarden replay ... | head`: the reader has seen enough
        sys.stderr.close()
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "replay",
        help="run detection over a JSONL event trace and print one JSON line per detection",
        description="Replay EVENTS.jsonl through the detection engine offline (no broker). "
        "Prints one JSON line per detection, emitted or not; bad lines go to stderr.",
    )
    p.add_argument("events", metavar="EVENTS.jsonl")
    p.add_argument("--config", metavar="FILE", help="OpenClaw-shaped config (JSON or JSON5)")
    p.add_argument("--incidents", action="store_true",
                   help="also print fleet incident records and cross_run_repeat verdicts (loopwarden.incidents / "
                        "loopwarden.crossRun in the config; time from the events' ts)")
    p.set_defaults(func=run)
