"""Per-run state, as msgspec Structs that encode compactly (they live in RocksDB).

One :class:`RunState` per (session key, normalized run id): the run's history
window (§6), its warning-bucket map (§9.4), its post-compaction guard (§10),
the calls the engine blocked (their results are the veto, §13.3) and the
recent event ids (duplicate deliveries are dropped).

The history is stored column-wise (:class:`History`): the hot questions
("how many records have signature S?", "what is the newest signature?") are
then single C-level list operations instead of Python loops over records.
The run id of §6.1 is implied by the state's key, so it is not stored.
"""

from __future__ import annotations

import msgspec

MAX_WARNING_KEYS = 256  # §9.4.5
MAX_BLOCKED_CALLS = 64
MAX_SEEN_EVENT_IDS = 128


class History(msgspec.Struct, array_like=True):
    """The window of records (§6.1), oldest first, one list per field."""

    tools: list[str] = msgspec.field(default_factory=list)
    args: list[str] = msgspec.field(default_factory=list)
    call_ids: list[str | None] = msgspec.field(default_factory=list)
    results: list[str | None] = msgspec.field(default_factory=list)
    unknowns: list[str | None] = msgspec.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.args)

    def push(self, tool: str, args: str, call_id: str | None, result: str | None, unknown: str | None, size: int) -> None:
        """Append a record, then drop the oldest beyond ``size`` (§6.2; §1.8: the size in force now)."""
        self.tools.append(tool)
        self.args.append(args)
        self.call_ids.append(call_id)
        self.results.append(result)
        self.unknowns.append(unknown)
        if len(self.args) > size:
            self.trim(size)

    def trim(self, size: int) -> None:
        """Drop the oldest records beyond ``size`` (§6.2, §1.8: the size in force now)."""
        excess = len(self.args) - size
        if excess > 0:
            del self.tools[:excess], self.args[:excess], self.call_ids[:excess]
            del self.results[:excess], self.unknowns[:excess]


class Guard(msgspec.Struct, array_like=True):
    """Post-compaction guard of one run (§10)."""

    remaining: int = 0
    window: list[tuple[str, str, str]] = msgspec.field(default_factory=list)
    aborted: bool = False


class RunState(msgspec.Struct, array_like=True):
    history: History = msgspec.field(default_factory=History)
    buckets: dict[str, int] = msgspec.field(default_factory=dict)
    guard: Guard = msgspec.field(default_factory=Guard)
    blocked: list[str] = msgspec.field(default_factory=list)
    seen: list[str] = msgspec.field(default_factory=list)
    # Fleet signatures (streams.fleet) this run has joined; None = none. Not read by OpenClaw's rules;
    # last and optional so states stored before it still decode.
    joined: list[str] | None = None


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(RunState)


def encode_state(state: RunState) -> bytes:
    return _encoder.encode(state)


def decode_state(raw: bytes) -> RunState:
    return _decoder.decode(raw)
