"""Building wire events for one run, and the run key of a verdict.

Every event gets ``ts`` (seconds since the epoch, for latency only) and a
fresh ``event_id`` (uuid4: the worker drops a repeated one within a run, so
a producer retry never counts a call twice). Payloads may be Python values
or ready :class:`msgspec.Raw` JSON; :class:`PayloadEncoder` never raises on
a value it cannot encode (loopwarden must not break a healthy agent).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

import msgspec
from msgspec import UNSET, Raw

from loopwarden.schemas.events import CompactionRetry, Event, RunEnd, ToolCall, ToolResult, VerdictAck, key_for
from loopwarden.schemas.verdicts import Verdict


class RunRef(msgspec.Struct, frozen=True, kw_only=True):
    """Who a run is: what every event of it carries, and its Kafka key."""

    agent_id: str
    session_id: str | None = None
    run_id: str | None = None

    @property
    def key(self) -> str:
        """The run key the worker uses (:func:`loopwarden.schemas.events.key_for`, the one definition)."""
        return key_for(self.agent_id, self.session_id, self.run_id)

    @property
    def ident(self) -> Ident:
        """Who the run is in a runner: its run key, agent and session (:func:`ident`)."""
        return self.key, self.agent_id, self.session_id or self.agent_id


Ident = tuple[str, str, str]


def ident(x: Event | Verdict, record_key: bytes | None = None) -> Ident:
    """A run's identity in a runner: (run key, agent, session), as the worker keys its state (agent,
    session, run): two agents, or two sessions, that send the same run id are two runs. An event's
    or a verdict's; a verdict's run key is its record's key when it has one (the worker writes it)."""
    key = (
        record_key.decode("utf-8", "replace") if record_key is not None else key_for(x.agent_id, x.session_id, x.run_id)
    )
    return key, x.agent_id, x.session_id or x.agent_id


def verdict_key(verdict: Verdict, record_key: bytes | None = None) -> str:
    """The run key a verdict belongs to: the record key (the worker writes the run key), else its fields."""
    if record_key is not None:
        return record_key.decode("utf-8", "replace")
    return RunRef(agent_id=verdict.agent_id, session_id=verdict.session_id, run_id=verdict.run_id).key


class PayloadEncoder:
    """Python values to wire JSON, never raising.

    msgspec encodes datetimes (RFC 3339), bytes (base64), dataclasses, enums,
    UUIDs and sets natively. On top of that: ``str``/``int``/``float``
    subclasses (smolagents' ``AgentText``) as their plain value, pydantic
    models by ``model_dump(mode="json")``, paths as text, exceptions as
    ``"Type: message"``. Anything else becomes its ``repr`` and so does a value
    that cannot be encoded at all (a cycle): each such fallback calls
    ``on_fallback`` (the client counts it).
    """

    def __init__(self, on_fallback: Callable[[], Any] | None = None) -> None:
        self._on_fallback = on_fallback
        self._encoder = msgspec.json.Encoder(enc_hook=self._hook)

    def __call__(self, value: Any) -> Raw:
        if isinstance(value, Raw):
            return value
        try:
            return Raw(self._encoder.encode(value))
        except Exception:  # noqa: BLE001 - a cycle, a hook that raised, an overflow: repr is the last resort
            return Raw(self._encoder.encode(self._fallback(value)))

    def _fallback(self, value: Any) -> str:
        if self._on_fallback is not None:
            self._on_fallback()
        try:
            return repr(value)
        except Exception:  # noqa: BLE001
            return f"<unrepresentable {type(value).__name__}>"

    def _hook(self, value: Any) -> Any:
        if isinstance(value, str):
            return str.__str__(value)
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return float(value)
        if isinstance(value, BaseException):
            return f"{type(value).__name__}: {value}"
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        dump = getattr(value, "model_dump", None)  # pydantic v2
        if callable(dump) and not isinstance(value, type):
            try:
                return dump(mode="json")
            except Exception:  # noqa: BLE001
                return self._fallback(value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return self._fallback(value)


def digest_payload(data: bytes) -> Raw:
    """A payload too large to send: its digest stands in (the same payload gives the same digest, so a
    loop of large identical calls still repeats)."""
    return Raw(msgspec.json.encode({"loopwarden_digest": hashlib.sha256(data).hexdigest(), "bytes": len(data)}))


def bounded_payload(raw: Raw, max_bytes: int) -> Raw:
    """``raw`` itself, or its digest when it is larger than ``max_bytes``."""
    return digest_payload(bytes(raw)) if len(raw) > max_bytes else raw


_default_encoder = PayloadEncoder()
Encode = Callable[[Any], Raw]


def _stamp() -> dict[str, Any]:
    return {"ts": time.time(), "event_id": uuid.uuid4().hex}


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def tool_call(
    run: RunRef,
    tool_name: str,
    params: Any = None,
    *,
    tool_call_id: str | None = None,
    await_decision: bool = False,
    encode: Encode = _default_encoder,
) -> ToolCall:
    """A ``tool_call``; a missing ``tool_call_id`` gets a fresh one (gate mode correlates on it)."""
    return ToolCall(
        agent_id=run.agent_id,
        session_id=run.session_id,
        run_id=run.run_id,
        tool_name=tool_name,
        tool_call_id=tool_call_id or new_call_id(),
        params=UNSET if params is None else encode(params),
        await_decision=await_decision,
        **_stamp(),
    )


def tool_result(
    run: RunRef,
    tool_name: str,
    params: Any = None,
    *,
    tool_call_id: str | None = None,
    result: Any = UNSET,
    error: Any = UNSET,
    encode: Encode = _default_encoder,
) -> ToolResult:
    """A ``tool_result``: pass ``result`` for an outcome, ``error`` when the tool threw."""
    return ToolResult(
        agent_id=run.agent_id,
        session_id=run.session_id,
        run_id=run.run_id,
        tool_name=tool_name,
        tool_call_id=tool_call_id,
        params=UNSET if params is None else encode(params),
        result=UNSET if result is UNSET else encode(result),
        error=UNSET if error is UNSET else encode(error),
        **_stamp(),
    )


def result_for(
    call: ToolCall, *, result: Any = UNSET, error: Any = UNSET, encode: Encode = _default_encoder
) -> ToolResult:
    """The ``tool_result`` of a published call: same run, tool, id and params."""
    return ToolResult(
        agent_id=call.agent_id,
        session_id=call.session_id,
        run_id=call.run_id,
        tool_name=call.tool_name,
        tool_call_id=call.tool_call_id,
        params=call.params,
        result=UNSET if result is UNSET else encode(result),
        error=UNSET if error is UNSET else encode(error),
        **_stamp(),
    )


def compaction_retry(run: RunRef, reason: str | None = None) -> CompactionRetry:
    return CompactionRetry(
        agent_id=run.agent_id, session_id=run.session_id, run_id=run.run_id, reason=reason, **_stamp()
    )


def run_end(run: RunRef) -> RunEnd:
    return RunEnd(agent_id=run.agent_id, session_id=run.session_id, run_id=run.run_id, **_stamp())


def verdict_ack(
    run: RunRef, verdict_id: str, outcome: Literal["applied", "failed"], detail: str | None = None
) -> VerdictAck:
    """The runner acted on verdict ``verdict_id`` (``applied``) or could not (``failed``)."""
    return VerdictAck(
        agent_id=run.agent_id,
        session_id=run.session_id,
        run_id=run.run_id,
        verdict_id=verdict_id,
        outcome=outcome,
        detail=detail,
        **_stamp(),
    )
