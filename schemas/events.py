"""Events that runners publish on ``agent.events`` (wire.md, "Events").

A tagged union on ``type``. Free-form payloads (``params``, ``result``,
``error``) decode as ``Any`` with JavaScript number semantics (see
:mod:`schemas.jsvalues`); ``result`` distinguishes *missing* (``UNSET``: no
outcome hash) from ``null`` (hashed).
"""

from __future__ import annotations

from typing import Any, Union

import msgspec
from msgspec import UNSET, UnsetType

from schemas.jsvalues import js_float


class _EventBase(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    agent_id: str
    session_id: str | None = None
    run_id: str | None = None
    ts: float | None = None
    event_id: str | None = None


class ToolCall(_EventBase, tag="tool_call"):
    """The agent is about to run a tool; detection runs here."""

    tool_name: str | None = None
    tool_call_id: str | None = None
    params: Any = msgspec.field(default_factory=dict)
    await_decision: bool = False


class ToolResult(_EventBase, tag="tool_result"):
    """The tool finished (``result``) or threw (``error``)."""

    tool_name: str | None = None
    tool_call_id: str | None = None
    params: Any = msgspec.field(default_factory=dict)
    result: Any | UnsetType = UNSET
    error: Any = None


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


_decoder = msgspec.json.Decoder(Event, float_hook=js_float)
_encoder = msgspec.json.Encoder()


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
        raise EventDecodeError("bad_json", str(exc)) from None
    if not event.agent_id.strip():
        raise EventDecodeError("blank_agent_id", "agent_id is empty")
    return event


def encode_event(event: Event) -> bytes:
    return _encoder.encode(event)


def session_key(event: Event) -> str:
    """``session_id`` when present, else ``agent_id`` (wire.md)."""
    return event.session_id if event.session_id else event.agent_id


def run_key(event: Event) -> str:
    """The Kafka key: ``run_id`` when non-blank, else the session key."""
    run = event.run_id
    if run is not None and run.strip():
        return run
    return session_key(event)
