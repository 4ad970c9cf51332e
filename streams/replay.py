"""``loopwarden replay``: the worker's detection path over a JSONL trace, offline.

Imports neither Faust nor aiokafka, so it starts fast; each event is decided by
the worker's own :func:`loopwarden.detection.decision.decide_event` (verdict ids
``<event_index>:<n>``, time from the events' ``ts``); replay only prints it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import msgspec

from loopwarden import UsageError
from loopwarden.detection import RunState, enforcement
from loopwarden.detection.decision import decide_event
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import EventDecodeError, VerdictAck, decode_event, state_key
from loopwarden.schemas.jsvalues import is_blank, json_bytes
from loopwarden.schemas.verdicts import Detection


class BadLine(NamedTuple):
    """A line that is not a valid event (reported, skipped)."""

    event_index: int  # among non-blank lines, from 0 (as in the output rows)
    reason: str
    detail: str
    line: int = 0  # the file's line number, from 1 (what an editor shows)


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
    if det.shadow:  # loopwarden extensions: absent from an OpenClaw-only config's output
        row["shadow"] = True
    if det.loop_tokens is not None:
        row["loop_tokens"] = det.loop_tokens
    if det.loop_cost is not None:
        row["loop_cost"] = det.loop_cost
    if det.liveness_signal is not None:  # profile openclaw-latest
        row["liveness_signal"] = det.liveness_signal
    return row


def violation_row(index: int, event, found: enforcement.Violation) -> dict:
    """A ``verdict_violation`` line (``--enforcement``); ``verdict_id`` is replay's ``<event_index>:<n>``."""
    row = {
        "type": "verdict_violation",
        "event_index": index,
        "kind": found.kind,
        "run_id": event.run_id,
        "agent_id": event.agent_id,
        "session_id": event.session_id,
        "tool_name": event.tool_name,
        "tool_call_id": event.tool_call_id,
    }
    if found.verdict_id is not None:
        row["verdict_id"] = found.verdict_id
    return row


def ack_row(index: int, event: VerdictAck) -> dict:
    row = {
        "type": "verdict_ack",
        "event_index": index,
        "run_id": event.run_id,
        "agent_id": event.agent_id,
        "session_id": event.session_id,
        "verdict_id": event.verdict_id,
        "outcome": event.outcome,
    }
    if event.detail is not None:
        row["detail"] = event.detail
    return row


def replay_lines(
    lines: Iterable[str | bytes], config: FleetConfig, *, incidents: bool = False, enforcement_rows: bool = False
) -> Iterator[dict | BadLine]:
    """Yield a row per detection and a :class:`BadLine` per invalid line, in input order.

    ``incidents``: also the fleet side's records after each event (incident
    records, ``cross_run_repeat`` verdicts), each with its ``event_index``.

    Escalation aborts (``loopwarden.escalation``) are detection rows, as the
    worker publishes them; with ``enforcement_rows`` also a row per
    ``verdict_violation`` and per ``verdict_ack`` (rows with a ``type``).
    """
    fleet = None
    if incidents:
        from loopwarden.fleet.offline import FleetTrace

        fleet = FleetTrace(config)
    board = fleet.board if fleet is not None else None
    states: dict[tuple[str, str], RunState] = {}
    index = -1
    for lineno, line in enumerate(lines, 1):
        if is_blank(line):
            continue
        index += 1
        try:
            event = decode_event(line)
        except EventDecodeError as exc:
            yield BadLine(index, exc.reason, exc.detail, lineno)
            continue
        key = state_key(event)
        before = states.get(key)
        agent = event.agent_id
        d = decide_event(
            before,
            event,
            config.resolve(agent),
            config.extensions_of(event),
            now=event.ts or 0.0,
            origin=index,
            board=board,
        )
        if d.state is None:
            states.pop(key, None)
        else:
            states[key] = d.state
        if d.duplicate:
            continue
        for det in d.detections:
            yield detection_row(index, event, det)
        if enforcement_rows and d.violation is not None:
            yield violation_row(index, event, d.violation)
        for v in d.escalations:
            yield detection_row(index, event, v.detection)
        if enforcement_rows and isinstance(event, VerdictAck):
            yield ack_row(index, event)
        if fleet is not None:
            for record in fleet.after(before, event, d):
                yield {"event_index": index, **msgspec.to_builtins(record)}


def load_checked_config(path: str | None, prog: str) -> FleetConfig | None:
    """The config, its warnings and the detection-off notice printed to stderr; ``None`` if unusable."""
    from loopwarden.schemas.config_check import load_checked

    return load_checked(path, lambda text: print(f"{prog}: {text}", file=sys.stderr))


def run(args) -> int:
    if args.events == "-":
        source = sys.stdin.buffer
    else:
        try:  # before the config's notices: a missing trace is the one line to see
            source = open(args.events, "rb")
        except OSError as exc:
            raise UsageError(f"cannot read {args.events}: {exc.strerror}") from None
    config = load_checked_config(args.config, "loopwarden replay")
    if config is None:
        source.close()
        return 2
    show = getattr(args, "enforcement", False)
    encode = json_bytes  # tool names and ids are taken as sent, lone surrogates included
    out = sys.stdout.buffer
    try:
        with source:
            for item in replay_lines(
                source, config, incidents=getattr(args, "incidents", False), enforcement_rows=show
            ):
                if isinstance(item, BadLine):
                    print(
                        f"line {item.line} (event_index {item.event_index}): {item.reason}: {item.detail}",
                        file=sys.stderr,
                    )
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
    p.add_argument("events", metavar="EVENTS.jsonl", help="the trace, one event per line; - reads standard input")
    p.add_argument("--config", metavar="FILE", help="OpenClaw-shaped config (JSON or JSON5)")
    p.add_argument(
        "--incidents",
        action="store_true",
        help="also print fleet incident records and cross_run_repeat verdicts (loopwarden.incidents / "
        "loopwarden.crossRun in the config; time from the events' ts)",
    )
    p.add_argument(
        "--enforcement",
        action="store_true",
        help='also print verdict_violation and verdict_ack lines (objects with a "type")',
    )
    p.set_defaults(func=run)
