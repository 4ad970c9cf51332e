"""Per signature: the incident state machine, in event time.

Before an incident, a signature keeps its recent joins (those within
``window`` of the newest). It opens when they hold at least ``minRuns``
distinct runs of at least ``minAgents`` agents. While open, every run that
joins for the first time publishes ``update``; once the event time passes
``last_seen + window`` without a join, ``resolved`` is published and the
signature's state is dropped. A repeated join of a run already counted (a
redelivery after a crash) changes nothing, so replays are harmless.
"""

from __future__ import annotations

import hashlib

import msgspec

from loopwarden.schemas.extensions import Incidents
from loopwarden.schemas.fleet import MAX_LISTED, Incident, JoinSignal

MAX_RECENT = 4096  # joins kept per signature before an incident opens
MAX_TRACKED = 1024  # distinct runs / agents remembered per open incident (counts beyond are estimates)


class Join(msgspec.Struct, array_like=True, frozen=True):
    run_key: str
    agent_id: str
    ts: float


class SignatureState(msgspec.Struct, array_like=True):
    """The fleet side's state of one signature (a table value)."""

    signature: str
    tool_name: str
    outcome_hash: str | None = None
    unknown_tool: str | None = None
    sample: str = ""
    recent: list[Join] = msgspec.field(default_factory=list)  # before the incident opens
    incident_id: str | None = None
    first_seen: float = 0.0
    last_seen: float = 0.0
    runs: list[str] = msgspec.field(default_factory=list)  # while open, bounded
    agents: list[str] = msgspec.field(default_factory=list)
    run_count: int = 0
    agent_count: int = 0
    # What the signature is, for the record (last: table values from before them still decode).
    fingerprint: str | None = None
    fingerprint_kind: str | None = None
    example: str = ""


def incident_id(signature: str, opened_at: float) -> str:
    """Deterministic: the same joins replayed give the same id (no duplicate incident)."""
    return "inc-" + hashlib.sha256(f"{signature}\x00{opened_at!r}".encode()).hexdigest()[:20]


def _record(st: SignatureState, state: str, ts: float) -> Incident:
    return Incident(
        incident_id=st.incident_id or "",
        state=state,
        signature=st.signature,
        tool_name=st.tool_name,
        outcome_hash=st.outcome_hash,
        unknown_tool=st.unknown_tool,
        sample=st.sample,
        run_count=st.run_count,
        agent_count=st.agent_count,
        run_keys=st.runs[:MAX_LISTED],
        agent_ids=st.agents[:MAX_LISTED],
        first_seen=st.first_seen,
        last_seen=st.last_seen,
        ts=ts,
        fingerprint=st.fingerprint,
        fingerprint_kind=st.fingerprint_kind,
        example=st.example,
    )


def expire(st: SignatureState | None, now: float, cfg: Incidents) -> tuple[SignatureState | None, list[Incident]]:
    """Advance event time to ``now``: resolve a quiet incident, forget old joins (``None``: drop the state)."""
    if st is None:
        return None, []
    if st.incident_id is not None:
        if now - st.last_seen >= cfg.window:
            return None, [_record(st, "resolved", now)]
        return st, []
    horizon = now - cfg.window
    if st.recent and st.recent[0].ts < horizon:
        st.recent = [j for j in st.recent if j.ts >= horizon]
    return (st if st.recent else None), []


def apply_join(st: SignatureState | None, signal: JoinSignal, cfg: Incidents) -> tuple[SignatureState, list[Incident]]:
    """One run joined: maybe ``open``, maybe ``update`` (a resolution due first comes first)."""
    out: list[Incident] = []
    if st is not None:
        st, out = expire(st, max(signal.ts, st.last_seen), cfg)
    if st is None:
        st = SignatureState(
            signature=signal.signature,
            tool_name=signal.tool_name,
            outcome_hash=signal.outcome_hash,
            unknown_tool=signal.unknown_tool,
            fingerprint=signal.fingerprint,
            fingerprint_kind=signal.fingerprint_kind,
        )
    if not st.sample and signal.sample:
        st.sample = signal.sample
    if not st.example and signal.example:
        st.example = signal.example
    if st.incident_id is not None:
        if signal.run_key in st.runs:
            return st, out
        _track(st, signal)
        st.last_seen = max(st.last_seen, signal.ts)
        out.append(_record(st, "update", signal.ts))
        return st, out
    recent = st.recent
    if any(j.run_key == signal.run_key for j in recent):
        return st, out
    recent.append(Join(signal.run_key, signal.agent_id, signal.ts))
    recent.sort(key=lambda j: j.ts)  # signals of different partitions may interleave
    horizon = max(j.ts for j in recent) - cfg.window
    recent[:] = [j for j in recent if j.ts >= horizon][-MAX_RECENT:]
    st.last_seen = recent[-1].ts
    agents = {j.agent_id for j in recent}
    if len(recent) >= cfg.min_runs and len(agents) >= cfg.min_agents:
        # Opened at the newest join's ts, not at the arriving one's: the runs' signals come from several
        # partitions in any order, and the same joins must open the same incident as replay's (one order).
        opened = recent[-1].ts
        st.incident_id = incident_id(st.signature, opened)
        st.first_seen = recent[0].ts
        for j in recent:
            _track(st, j)
        st.recent = []
        out.append(_record(st, "open", opened))
    return st, out


def _track(st: SignatureState, join: Join | JoinSignal) -> None:
    st.run_count += 1
    if len(st.runs) < MAX_TRACKED:
        st.runs.append(join.run_key)
    if join.agent_id not in st.agents:
        st.agent_count += 1
        if len(st.agents) < MAX_TRACKED:
            st.agents.append(join.agent_id)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(SignatureState)


def encode_state(st: SignatureState) -> bytes:
    return _encoder.encode(st)


def decode_state(raw: bytes) -> SignatureState:
    return _decoder.decode(raw)
