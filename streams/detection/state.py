"""Per-run state, as msgspec Structs that encode compactly (they live in RocksDB).

One :class:`RunState` per (session key, normalized run id): the run's history
window (§6), its warning-bucket map (§9.4), its post-compaction guard (§10),
the call ids the engine blocked (their results are the veto, §13.3) and the
recent event ids (duplicate deliveries are dropped).
"""

from __future__ import annotations

import msgspec

MAX_WARNING_KEYS = 256  # §9.4.5
MAX_BLOCKED_CALLS = 64
MAX_SEEN_EVENT_IDS = 128


class Record(msgspec.Struct, array_like=True):
    """One history record (§6.1); the run id is implied by the state's key."""

    tool: str
    args: str
    call_id: str | None = None
    result: str | None = None
    unknown: str | None = None


class Guard(msgspec.Struct, array_like=True):
    """Post-compaction guard of one run (§10)."""

    remaining: int = 0
    window: list[tuple[str, str, str]] = msgspec.field(default_factory=list)
    aborted: bool = False


class RunState(msgspec.Struct, array_like=True):
    history: list[Record] = msgspec.field(default_factory=list)
    buckets: dict[str, int] = msgspec.field(default_factory=dict)
    guard: Guard = msgspec.field(default_factory=Guard)
    blocked: list[str] = msgspec.field(default_factory=list)
    seen: list[str] = msgspec.field(default_factory=list)


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(RunState)


def encode_state(state: RunState) -> bytes:
    return _encoder.encode(state)


def decode_state(raw: bytes) -> RunState:
    return _decoder.decode(raw)
