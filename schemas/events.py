"""Events that runners publish on ``agent.events`` (schemas/WIRE.md, "Events").

A tagged union on ``type``. The free-form payloads (``params``, ``result``,
``error``) stay :class:`msgspec.Raw` JSON: decoding them into Python objects
is most of the cost of an event, and the engine only needs them when a hash
is not already cached for the same bytes (see
:mod:`loopwarden.detection.payloads`). ``result`` distinguishes *missing*
(``UNSET``: no outcome hash) from ``null`` (hashed); ``error: null`` is no
error. Build payloads in Python with :func:`payload`.
"""

from __future__ import annotations

import json
import math
import re
from json.decoder import scanstring
from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import UNSET, Raw, UnsetType

from loopwarden.schemas.jsvalues import js_double, js_int, js_trim, json_bytes, to_well_formed

MAX_ID_CHARS = 512
MAX_TOOL_NAME_CHARS = 256
# The identifiers of an event have caps in characters (reason ``id_too_long``, ID_CAPS): each is kept
# in a run's state, its table key or a cache, so one event must not make those unbounded. Real ids
# are UUIDs and tool names are short (model APIs allow 64 or 128 characters). msgspec checks them
# as it decodes; the slow path (_envelope) tells an id over its cap from a wrong type.
_Id = Annotated[str, msgspec.Meta(max_length=MAX_ID_CHARS)]
_ToolName = Annotated[str, msgspec.Meta(max_length=MAX_TOOL_NAME_CHARS)]


class _EventBase(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    agent_id: _Id
    session_id: _Id | None = None
    run_id: _Id | None = None
    ts: float | None = None
    event_id: _Id | None = None
    # Where the event comes from when not from a runner: "otel" (loopwarden.otel, OpenTelemetry
    # spans) is only watched, never enforced (schemas/extensions.py, OBSERVED_ORIGINS).
    origin: str | None = None


_Count = Annotated[int, msgspec.Meta(ge=0)]


class Usage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the model spent producing one tool call (its share of the turn)."""

    input_tokens: _Count
    output_tokens: _Count
    cost: Annotated[float, msgspec.Meta(ge=0)] | None = None  # in the fleet's currency


class RunnerDecision(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a runner that embeds the engine decided for its own call (schemas/WIRE.md, "Runner decisions").

    The worker compares it with its own decision for the same event and
    publishes only a correction where it is stricter; runners that decide
    nothing leave ``ToolCall.decision`` out.
    """

    action: Literal["allow", "warn", "block", "abort"]
    verdict_id: str | None = None  # the id the runner gave its verdict (acks refer to it); none for allow
    detector: str | None = None
    count: Annotated[int, msgspec.Meta(ge=0)] | None = None


class ToolCall(_EventBase, tag="tool_call"):
    """The agent is about to run a tool; detection runs here."""

    tool_name: _ToolName | None = None
    tool_call_id: _Id | None = None
    params: Raw | UnsetType = UNSET  # missing means {}
    await_decision: bool = False
    usage: Usage | None = None  # charged to a loop when the call is part of one
    # The tool's working directory; the openclaw-latest profile resolves a relative
    # `write` path against it (without it the path as sent is the write's target).
    cwd: str | None = None
    decision: RunnerDecision | None = None  # the runner's own (local) decision for this call, if it made one


class ToolResult(_EventBase, tag="tool_result"):
    """The tool finished (``result``) or threw (``error``)."""

    tool_name: _ToolName | None = None
    tool_call_id: _Id | None = None
    params: Raw | UnsetType = UNSET  # missing means {}
    result: Raw | UnsetType = UNSET
    error: Raw | UnsetType = UNSET  # missing or null: no error


class CompactionRetry(_EventBase, tag="compaction_retry"):
    """The runner compacted an overflowing context and retries: arms the guard."""

    reason: str | None = None


class RunEnd(_EventBase, tag="run_end"):
    """The run is over; its state can go."""


class VerdictAck(_EventBase, tag="verdict_ack"):
    """The runner acted on a verdict (``applied``) or could not (``failed``); detection ignores it."""

    verdict_id: _Id
    outcome: Literal["applied", "failed"]
    detail: str | None = None


Event = ToolCall | ToolResult | CompactionRetry | RunEnd | VerdictAck
EVENT_TYPES: tuple[type, ...] = (ToolCall, ToolResult, CompactionRetry, RunEnd, VerdictAck)


DeadLetterReason = Literal[
    "unreadable",
    "empty",
    "too_large",
    "too_deep",
    "bad_json",
    "wrong_type",
    "missing_field",
    "unknown_type",
    "blank_agent_id",
    "id_too_long",
    "misrouted",
    "engine_error",
]
"""Why a record became a dead letter; the one table (schemas/WIRE.md, "Dead-letter reasons").

- ``unreadable``: the Kafka client could not parse the record (a header key that is not
  UTF-8, a batch whose CRC or compression is broken): ``detail`` says why and which offsets;
  ``raw`` is empty (the record's bytes never reached us as a record), ``size``/``sha256``
  those of nothing.
- ``empty``: the record has no value (a tombstone) or zero bytes.
- ``too_large``: more bytes than ``max_event_bytes`` (checked before parsing).
- ``too_deep``: arrays/objects nested deeper than ``max_depth``.
- ``bad_json``: not JSON as ``JSON.parse`` reads it: a syntax error, bytes that
  are not UTF-8, ``NaN``/``Infinity`` tokens, a byte-order mark.
- ``wrong_type``: JSON, but not an object, or a field of the wrong JSON type
  (``type``/``agent_id`` not a string; ``session_id``, ``run_id``, ``event_id``,
  ``origin``, ``tool_name``, ``tool_call_id``, ``reason``, ``cwd`` not a string or null; ``ts`` not
  a number or null; ``await_decision`` not a boolean).
- ``missing_field``: ``type`` or ``agent_id`` absent or null.
- ``unknown_type``: ``type`` is a string, but not one of the event types, as sent
  (``"tool_\\udbffcall"`` is not ``tool_call``).
- ``blank_agent_id``: ``agent_id`` is empty after JavaScript's ``trim()``.
- ``id_too_long``: an identifier longer than its cap (:data:`ID_CAPS`, in characters):
  ``tool_name`` 256; ``agent_id``, ``session_id``, ``run_id``, ``tool_call_id``,
  ``event_id``, ``verdict_id`` 512. They are stored in run state, keys and caches.
- ``misrouted``: the event decoded, but its Kafka key is not its run key
  (:data:`MISROUTED`).
- ``engine_error``: the event decoded but the engine raised (a bug; logged).

Not a dead letter: a ``ts`` beyond the double range (``1e400``) is Infinity in
JavaScript, no usable time, and reads as null; the envelope's other fields are
taken as sent, lone surrogates included.
"""
DEAD_LETTER_REASONS: tuple[str, ...] = get_args(DeadLetterReason)

ID_CAPS: dict[str, int] = {
    "agent_id": MAX_ID_CHARS,
    "session_id": MAX_ID_CHARS,
    "run_id": MAX_ID_CHARS,
    "event_id": MAX_ID_CHARS,
    "tool_call_id": MAX_ID_CHARS,
    "verdict_id": MAX_ID_CHARS,
    "tool_name": MAX_TOOL_NAME_CHARS,
}


MISROUTED = "misrouted"
"""The dead-letter reason of an event that decoded but whose Kafka key is not its run key
(:func:`run_key`): its run's other events may sit on another partition, in another order, so
the worker does not apply it (``misrouted: process`` applies it anyway; counted either way)."""


class EventDecodeError(ValueError):
    """Raised for bytes that are not a valid event; ``reason`` is a :data:`DeadLetterReason`."""

    def __init__(self, reason: DeadLetterReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


_decoder = msgspec.json.Decoder(Event)
_encoder = msgspec.json.Encoder()
_TAGS = frozenset(cls.__struct_config__.tag for cls in EVENT_TYPES)
_PAYLOADS = frozenset({"params", "result", "error"})


def payload(value: Any) -> Raw:
    """A Python value as a wire payload (``params``, ``result``, ``error``)."""
    return Raw(json_bytes(value))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# The top level of an event, walked by hand so that payloads keep their exact bytes.
_WS = re.compile(r"[ \t\n\r]*")
_ENVELOPE_JSON = json.JSONDecoder(parse_int=js_int, parse_constant=_reject_constant)


def _parse_js(raw: bytes | str) -> Any:
    """``JSON.parse`` of a record msgspec refused: the top-level object's values, payloads as Raw.

    Envelope values are Python values, strings exactly as parsed (lone
    surrogates kept); ``params``/``result``/``error`` stay their original
    bytes (:mod:`loopwarden.detection.payloads` decodes them). A repeated key:
    the last wins, as in JavaScript. Raises ``ValueError`` if it is not JSON.
    """
    text = bytes(raw).decode("utf-8") if not isinstance(raw, str) else raw
    idx = _WS.match(text).end()
    if not text.startswith("{", idx):
        return _ENVELOPE_JSON.decode(text)  # JSON but no object (wrong_type), or not JSON
    fields: dict[str, Any] = {}
    idx = _WS.match(text, idx + 1).end()
    if text.startswith("}", idx):
        idx += 1
    else:
        while True:
            if not text.startswith('"', idx):
                raise ValueError(f"expected a key at {idx}")
            key, idx = scanstring(text, idx + 1, True)
            idx = _WS.match(text, idx).end()
            if not text.startswith(":", idx):
                raise ValueError(f"expected ':' at {idx}")
            idx = _WS.match(text, idx + 1).end()
            value, end = _ENVELOPE_JSON.raw_decode(text, idx)
            fields[key] = Raw(text[idx:end].encode("utf-8", "surrogatepass")) if key in _PAYLOADS else value
            idx = _WS.match(text, end).end()
            if text.startswith(",", idx):
                idx = _WS.match(text, idx + 1).end()
            elif text.startswith("}", idx):
                idx += 1
                break
            else:
                raise ValueError(f"expected ',' or '}}' at {idx}")
    if _WS.match(text, idx).end() != len(text):
        raise ValueError(f"extra data at {idx}")
    return fields


def _envelope(value: Any) -> Event:
    """A parsed record as an event, or :class:`EventDecodeError` with its :data:`DeadLetterReason`."""
    if not isinstance(value, dict):
        raise EventDecodeError("wrong_type", f"an event is a JSON object, not {type(value).__name__}")
    tag = value.get("type")
    if tag is None:
        raise EventDecodeError("missing_field", "`type` is missing or null")
    if not isinstance(tag, str):
        raise EventDecodeError("wrong_type", f"`type` must be a string, not {type(tag).__name__}")
    if tag not in _TAGS:
        raise EventDecodeError("unknown_type", f"unknown event type {tag!r}")
    if value.get("agent_id") is None:
        raise EventDecodeError("missing_field", "`agent_id` is missing or null")
    ts = value.get("ts")
    if (
        isinstance(ts, (int, float))
        and not isinstance(ts, bool)
        and not math.isfinite(js_double(ts) if isinstance(ts, int) else ts)
    ):
        value["ts"] = None  # beyond the double range: Infinity in JavaScript, no usable time
    try:
        return msgspec.convert(value, Event)
    except msgspec.ValidationError as exc:
        error = exc
    # An identifier over its cap is id_too_long only if the event is otherwise valid (a wrong type
    # elsewhere wins, and so does a blank agent id): judged with the long ones cut to their caps.
    long = [name for name, cap in ID_CAPS.items() if isinstance(value.get(name), str) and len(value[name]) > cap]
    if not long:
        raise EventDecodeError("wrong_type", str(error))
    try:
        event = msgspec.convert({**value, **{name: value[name][: ID_CAPS[name]] for name in long}}, Event)
    except msgspec.ValidationError:
        raise EventDecodeError("wrong_type", str(error)) from None
    _check_agent_id(event)
    name = long[0]
    raise EventDecodeError("id_too_long", f"{name} has {len(value[name])} characters > limit {ID_CAPS[name]}")


def _check_agent_id(event: Event) -> None:
    if not js_trim(event.agent_id):
        raise EventDecodeError("blank_agent_id", "agent_id is empty")


def decode_event(raw: bytes | str) -> Event:
    """Decode one event as sent; raise :class:`EventDecodeError` with a :data:`DeadLetterReason`.

    msgspec decodes (nearly) every valid event. What it refuses gets a second,
    exact reading with JavaScript's rules (:func:`_parse_js`): lone surrogate
    escapes (valid in ``JSON.parse``), ``ts`` beyond the double range, repeated
    keys; that reading also gives every invalid record its reason. No field
    is altered: lone surrogates are dropped only when payloads are hashed (§2.2).
    """
    try:
        event = _decoder.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        try:
            value = _parse_js(raw)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            raise EventDecodeError("bad_json", str(exc)) from None
        event = _envelope(value)
    _check_agent_id(event)
    return event


def encode_event(event: Event) -> bytes:
    """An event as JSON; a lone surrogate in a field is written as a ``\\udXXX`` escape."""
    return json_bytes(event)


def run_scope(run_id: str | None) -> str:
    """The run id as the rules compare it: trimmed the JavaScript way; "" = unscoped (§6.5)."""
    return js_trim(run_id) if run_id else ""


def key_for(agent_id: str, session_id: str | None, run_id: str | None) -> str:
    """The run key (schemas/WIRE.md, "Keys"): ``run_id`` when non-blank, else the session key.

    Kafka keys are bytes: a lone surrogate becomes U+FFFD, as a JavaScript
    runner's UTF-8 encoding writes it (the run's state key stays exact).
    """
    if run_id and run_scope(run_id):
        return to_well_formed(run_id)
    return to_well_formed(session_id if session_id else agent_id)


def session_key(event: Event) -> str:
    """``session_id`` when present, else ``agent_id`` (schemas/WIRE.md, "Keys")."""
    return event.session_id if event.session_id else event.agent_id


def run_key(event: Event) -> str:
    """The Kafka key of an event (messages of one run share a partition)."""
    return key_for(event.agent_id, event.session_id, event.run_id)


def state_key(event: Event) -> tuple[str, str, str]:
    """Where a run's state lives: (agent id, session key, run scope) (§11.1).

    The agent is part of it, as OpenClaw keeps one state per agent: two agents that share a
    session id and send no run id do not share a history.
    """
    run_id = event.run_id  # session_key() and run_scope(), inlined: this runs for every event
    return event.agent_id, event.session_id or event.agent_id, js_trim(run_id) if run_id else ""


def legacy_state_key(event: Event) -> tuple[str, str]:
    """The state key before the agent id was part of it: (session key, run scope). A worker upgraded
    in place still finds its in-flight runs' states under it (``loopwarden.worker.runcodec``)."""
    run_id = event.run_id
    return event.session_id or event.agent_id, js_trim(run_id) if run_id else ""
