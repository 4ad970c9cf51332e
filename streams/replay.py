"""``loopwarden replay``: the worker's detection path over a JSONL trace, offline.

Imports neither Faust nor aiokafka, so it starts fast; it calls the same
:func:`streams.detection.step` the worker calls.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from schemas.config import ConfigError, FleetConfig, load_config
from schemas.events import EventDecodeError, decode_event, state_key
from schemas.jsvalues import js_trim, json_bytes
from schemas.verdicts import Detection
from streams.detection import RunState, step


def is_blank(line: str | bytes) -> bool:
    """Empty after JavaScript's ``trim()`` (U+00A0, U+2028, a BOM … are blank too): skipped, not counted."""
    if isinstance(line, bytes):
        stripped = line.strip()  # ASCII whitespace, all of it in trim()'s set
        if not stripped or stripped.isascii():
            return not stripped
        line = stripped.decode("utf-8", "replace")
    return not js_trim(line)


class BadLine(NamedTuple):
    """A line that is not a valid event (reported, skipped)."""

    event_index: int
    reason: str
    detail: str


def detection_row(index: int, event, det: Detection) -> dict:
    """One replay output line, fields in the order of schemas/WIRE.md."""
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


def replay_lines(lines: Iterable[str | bytes], config: FleetConfig) -> Iterator[dict | BadLine]:
    """Yield a row per detection and a :class:`BadLine` per invalid line, in input order."""
    states: dict[tuple[str, str], RunState] = {}
    index = -1
    for line in lines:
        if is_blank(line):
            continue
        index += 1
        try:
            event = decode_event(line)
        except EventDecodeError as exc:
            yield BadLine(index, exc.reason, exc.detail)
            continue
        key = state_key(event)
        result = step(states.get(key), event, config.resolve(event.agent_id))
        if result.state is None:
            states.pop(key, None)
        else:
            states[key] = result.state
        for det in result.detections:
            yield detection_row(index, event, det)


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
    encode = json_bytes  # tool names and ids are taken as sent, lone surrogates included
    out = sys.stdout.buffer
    try:
        with source:
            for item in replay_lines(source, config):
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
    p.set_defaults(func=run)
