"""Wire Structs of the fleet side (loopwarden.fleet): the signals runs send, the incidents it publishes.

Signals travel on repartition topics (keyed by signature, or by session key)
from the worker that owns a run to the worker that owns the signature or the
session. Incidents go out on the incidents topic, keyed by ``incident_id``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

MAX_SAMPLE_CHARS = 256  # outcome text kept as a sample
MAX_LISTED = 20  # run keys / agent ids listed in an incident record

IncidentState = Literal["open", "update", "resolved"]

_key_encoder = msgspec.json.Encoder()
_key_decoder = msgspec.json.Decoder(tuple[str, ...])


def outcome_signature(tool: str, outcome_hash: str) -> str:
    """The signature of a failure seen as (tool, outcome hash), whatever the arguments."""
    return _key_encoder.encode(("outcome", tool, outcome_hash)).decode()


def unknown_signature(name: str) -> str:
    """The signature of calls to one tool the runner does not have."""
    return _key_encoder.encode(("unknown", name)).decode()


def print_signature(tool: str, fingerprint: str) -> str:
    """The signature of a failure seen as (tool, failure fingerprint), whatever the arguments."""
    return _key_encoder.encode(("print", tool, fingerprint)).decode()


def parse_signature(signature: str) -> tuple[str, str | None, str | None, str | None]:
    """``(tool_name, outcome_hash, unknown_tool, fingerprint)`` of a signature string."""
    parts = _key_decoder.decode(signature)
    if parts[0] == "unknown":
        return parts[1], None, parts[1], None
    if parts[0] == "print":
        return parts[1], None, None, parts[2]
    return parts[1], parts[2], None, None


class JoinSignal(msgspec.Struct, kw_only=True, frozen=True, tag_field="type", tag="join"):
    """One run joined one signature (sent once per run per signature)."""

    signature: str
    run_key: str
    agent_id: str
    ts: float
    tool_name: str
    outcome_hash: str | None = None
    unknown_tool: str | None = None
    streak: int = 0  # matching records in the run's window when it joined
    sample: str = ""  # the outcome's text, cut to MAX_SAMPLE_CHARS
    # The failure fingerprint the run joined by ("n1:<hex>", loopwarden.fleet.fingerprint) or, for
    # an exact signature, its outcome hash; its kind ("normalized-1" or "exact"); None: unknown tool.
    fingerprint: str | None = None
    fingerprint_kind: str | None = None
    example: str = ""  # the outcome, normalized (paths, ids, secrets taken out), bounded


class FinishedRun(msgspec.Struct, kw_only=True, frozen=True, tag_field="type", tag="finished_run"):
    """A run ended; its fingerprint, for its session's ``cross_run_repeat``."""

    session_key: str
    run_key: str
    agent_id: str
    ts: float
    fingerprint: str  # "" for a run without records
    records: int
    session_id: str | None = None
    run_id: str | None = None
    origin: str | None = None  # the run's events' origin: "otel" runs are only watched (shadowed)


Signal = JoinSignal | FinishedRun
_signal_decoder = msgspec.json.Decoder(Signal)
_encoder = msgspec.json.Encoder()


class Incident(msgspec.Struct, kw_only=True, tag_field="type", tag="incident"):
    """An incident record on the incidents topic (key: ``incident_id``).

    ``incident_id`` depends only on the signature and the event time of the
    join that opened it, so a replay after a crash re-publishes the same id
    instead of opening a second incident.
    """

    incident_id: str
    state: IncidentState
    signature: str
    tool_name: str
    outcome_hash: str | None
    unknown_tool: str | None
    sample: str
    run_count: int
    agent_count: int
    run_keys: list[str]  # first MAX_LISTED joined
    agent_ids: list[str]  # first MAX_LISTED joined
    first_seen: float
    last_seen: float
    ts: float
    # What failed, for operators (optional: records from before it decode): the failure
    # fingerprint (or the exact outcome hash), its kind with the version of the rules
    # ("normalized-1", "exact"), and one outcome normalized and cut to 256 characters. Never put
    # before a model: the fleet response's message names only the incident.
    fingerprint: str | None = None
    fingerprint_kind: str | None = None
    example: str = ""


_incident_decoder = msgspec.json.Decoder(Incident)


def encode(record: Signal | Incident) -> bytes:
    return _encoder.encode(record)


def decode_signal(raw: bytes) -> Signal:
    return _signal_decoder.decode(raw)


def decode_incident(raw: bytes) -> Incident:
    return _incident_decoder.decode(raw)


def signal_key(signal: Signal) -> bytes:
    """The repartition key: the signature, or the session key."""
    return (signal.signature if isinstance(signal, JoinSignal) else signal.session_key).encode()
