"""Events that runners publish on ``agent.events`` (wire.md, "Events").

A tagged union on ``type``. The free-form payloads (``params``, ``result``,
``error``) stay :class:`msgspec.Raw` JSON: decoding them into Python objects
is most of the cost of an event, and the engine only needs them when a hash
is not already cached for the same bytes (see
:mod:`streams.detection.payloads`). ``result`` distinguishes *missing*
(``UNSET``: no outcome hash) from ``null`` (hashed); ``error: null`` is no
error. Build payloads in Python with :func:`payload`.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Union

import msgspec
from msgspec import UNSET, Raw, UnsetType

from schemas.jsvalues import drop_lone_surrogates, js_trim


class _EventBase(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    agent_id: str
    session_id: str | None = None
    run_id: str | None = None
    ts: float | None = None
    event_id: str | None = None


_Count = Annotated[int, msgspec.Meta(ge=0)]


class Usage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the model spent producing one tool call (its share of the turn)."""

    input_tokens: _Count
    output_tokens: _Count
    cost: Annotated[float, msgspec.Meta(ge=0)] | None = None  # in the fleet's currency


class ToolCall(_EventBase, tag="tool_call"):
    """The agent is about to run a tool; detection runs here."""

    tool_name: str | None = None
    tool_call_id: str | None = None
    params: Raw | UnsetType = UNSET  # missing means {}
    await_decision: bool = False
    usage: Usage | None = None  # charged to a loop when the call is part of one


class ToolResult(_EventBase, tag="tool_result"):
    """The tool finished (``result``) or threw (``error``)."""

    tool_name: str | None = None
    tool_call_id: str | None = None
    params: Raw | UnsetType = UNSET  # missing means {}
    result: Raw | UnsetType = UNSET
    error: Raw | UnsetType = UNSET  # missing or null: no error


class CompactionRetry(_EventBase, tag="compaction_retry"):
    """The runner compacted an overflowing context and retries: arms the guard."""

    reason: str | None = None


class RunEnd(_EventBase, tag="run_end"):
    """The run is over; its state can go."""


Event = Union[ToolCall, ToolResult, CompactionRetry, RunEnd]
EVENT_TYPES: tuple[type, ...] = (ToolCall, ToolResult, CompactionRetry, RunEnd)


class EventDecodeError(ValueError):
    """Raised for bytes that are not a valid event; ``reason`` is a short label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


_decoder = msgspec.json.Decoder(Event)
_encoder = msgspec.json.Encoder()


def payload(value: Any) -> Raw:
    """A Python value as a wire payload (``params``, ``result``, ``error``)."""
    return Raw(_encoder.encode(value))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _decode_lenient(raw: bytes | str) -> Event:
    """Second chance for JSON that JavaScript accepts but msgspec does not.

    ``JSON.parse`` takes lone UTF-16 surrogate escapes (``"\\ud800"``); OpenClaw's
    serializer later drops them (§2.2), so drop them here and decode again.
    """
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    value = json.loads(text, parse_constant=_reject_constant)
    return _decoder.decode(_encoder.encode(drop_lone_surrogates(value)))


def _classify(message: str) -> str:
    if message.startswith("Invalid value") and "type" in message and "$.type" in message:
        return "unknown_type"
    if message.startswith("Object missing required field"):
        return "missing_field"
    if message.startswith("Expected") or message.startswith("Invalid"):
        return "wrong_type"
    return "bad_json"


def decode_event(raw: bytes | str) -> Event:
    """Decode one event; raise :class:`EventDecodeError` with a reason label.

    Reasons: ``bad_json`` (not JSON), ``missing_field``, ``wrong_type``,
    ``unknown_type`` (``type`` tag not one of the four), ``blank_agent_id``.
    """
    try:
        event = _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        text = str(exc)
        if "Missing required field `type`" in text or "Object missing required field `type`" in text:
            raise EventDecodeError("missing_field", text) from None
        raise EventDecodeError(_classify(text), text) from None
    except msgspec.DecodeError as exc:
        try:
            event = _decode_lenient(raw)
        except msgspec.ValidationError as exc2:
            raise EventDecodeError(_classify(str(exc2)), str(exc2)) from None
        except (ValueError, UnicodeDecodeError, RecursionError, msgspec.DecodeError):
            raise EventDecodeError("bad_json", str(exc)) from None
    if not js_trim(event.agent_id):
        raise EventDecodeError("blank_agent_id", "agent_id is empty")
    return event


def encode_event(event: Event) -> bytes:
    return _encoder.encode(event)


def run_scope(run_id: str | None) -> str:
    """The run id as the rules compare it: trimmed the JavaScript way; "" = unscoped (§6.5)."""
    return js_trim(run_id) if run_id else ""


def key_for(agent_id: str, session_id: str | None, run_id: str | None) -> str:
    """The run key (wire.md): ``run_id`` when non-blank, else the session key."""
    if run_id and run_scope(run_id):
        return run_id
    return session_id if session_id else agent_id


def session_key(event: Event) -> str:
    """``session_id`` when present, else ``agent_id`` (wire.md)."""
    return event.session_id if event.session_id else event.agent_id


def run_key(event: Event) -> str:
    """The Kafka key of an event (messages of one run share a partition)."""
    return key_for(event.agent_id, event.session_id, event.run_id)


def state_key(event: Event) -> tuple[str, str]:
    """Where a run's state lives: (session key, run scope) (§11.1)."""
    return session_key(event), run_scope(event.run_id)
