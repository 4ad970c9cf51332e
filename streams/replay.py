"""``loopwarden replay``: the worker's detection path over a JSONL trace, offline.

Imports neither Faust nor aiokafka, so it starts fast; it calls the same
:func:`streams.detection.step` the worker calls.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from schemas.config import ConfigError, FleetConfig, load_config
from schemas.events import EventDecodeError, VerdictAck, decode_event, state_key
from schemas.jsvalues import js_trim, json_bytes
from schemas.verdicts import Detection
from streams.detection import RunState, enforcement, step


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


def violation_row(index: int, event, found: enforcement.Violation) -> dict:
    """A ``verdict_violation`` line (``--enforcement``); ``verdict_id`` is replay's ``<event_index>:<n>``."""
    row = {"type": "verdict_violation", "event_index": index, "kind": found.kind, "run_id": event.run_id,
           "agent_id": event.agent_id, "session_id": event.session_id, "tool_name": event.tool_name,
           "tool_call_id": event.tool_call_id}
    if found.verdict_id is not None:
        row["verdict_id"] = found.verdict_id
    return row


def ack_row(index: int, event: VerdictAck) -> dict:
    row = {"type": "verdict_ack", "event_index": index, "run_id": event.run_id, "agent_id": event.agent_id,
           "session_id": event.session_id, "verdict_id": event.verdict_id, "outcome": event.outcome}
    if event.detail is not None:
        row["detail"] = event.detail
    return row


def replay_lines(lines: Iterable[str | bytes], config: FleetConfig,
                 enforcement_rows: bool = False) -> Iterator[dict | BadLine]:
    """Yield a row per detection and a :class:`BadLine` per invalid line, in input order.

    Escalation aborts (``loopwarden.escalation``) are detection rows, as the
    worker publishes them; with ``enforcement_rows`` also a row per
    ``verdict_violation`` and per ``verdict_ack`` (rows with a ``type``).
    """
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
        before = states.get(key)
        found = enforcement.violation(before, event)
        result = step(before, event, config.resolve(event.agent_id))
        if result.state is None:
            states.pop(key, None)
        else:
            states[key] = result.state
        if result.duplicate:
            continue
        published = []
        for det in result.detections:
            yield detection_row(index, event, det)
            if det.emitted:
                published.append((f"{index}:{len(published)}", det))
        n = len(published)

        def next_id() -> str:
            nonlocal n
            n += 1
            return f"{index}:{n - 1}"

        extra = enforcement.after_step(result.state, event, found, published, next_id, event.ts or 0.0,
                                       config.extensions(event.agent_id).escalation) if published or found or (
            result.state is not None and result.state.enforcement is not None) else ()
        if enforcement_rows and found is not None:
            yield violation_row(index, event, found)
        for _, det in extra:
            yield detection_row(index, event, det)
        if enforcement_rows and isinstance(event, VerdictAck):
            yield ack_row(index, event)


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
    show = getattr(args, "enforcement", False)
    encode = json_bytes  # tool names and ids are taken as sent, lone surrogates included
    out = sys.stdout.buffer
    try:
        with source:
            for item in replay_lines(source, config, show):
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
    p.add_argument("--enforcement", action="store_true",
                   help="also print verdict_violation and verdict_ack lines (objects with a \"type\")")
    p.set_defaults(func=run)
