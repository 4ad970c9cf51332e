"""Per-run state, as msgspec Structs that encode compactly (they live in RocksDB).

One :class:`RunState` per (session key, normalized run id): the run's history
window (§6), its warning-bucket map (§9.4), its post-compaction guard (§10),
the calls the engine blocked (their results are the veto, §13.3) and the
recent event ids (duplicate deliveries are dropped).

The history is stored column-wise (:class:`History`): the hot questions
("how many records have signature S?", "what is the newest signature?") are
then single C-level list operations instead of Python loops over records.
The run id of §6.1 is implied by the state's key, so it is not stored.

Stored values carry the format's version (:data:`FORMAT_VERSION`) in their
first byte; the format, what each version holds and the policy for changing
it are in STATE.md beside this module.
"""

from __future__ import annotations

from hashlib import blake2b
from typing import Any

import msgspec

MAX_WARNING_KEYS = 256  # §9.4.5
# Blocked calls whose results have not arrived yet (each result is the veto,
# §13.3). A runner reports a blocked call's result as soon as it has refused
# the call, so only calls in flight together count; no model response carries
# this many tool calls. Beyond it the oldest is forgotten (``blocked_overflow``).
MAX_BLOCKED_CALLS = 16384
MAX_SEEN_EVENT_IDS = 128
# A remembered event id is its 64-bit BLAKE2b digest: a run's last 128 ids are then one
# 1 KiB bytes object instead of 128 strings (STATE.md, version 3). Two ids of one run share
# a digest with a chance of about 128 in 2**64 per event.
EVENT_DIGEST_SIZE = 8
# Verdicts of one run awaiting a runner's ``verdict_ack``; beyond it the oldest is
# forgotten (``Enforcement.awaited_overflow``). A run that gets this many verdicts
# without acking any is not obeying them anyway.
MAX_AWAITED_ACKS = 64


class History(msgspec.Struct, array_like=True, dict=True):
    """The window of records (§6.1), oldest first, one list per field.

    ``count(sig)`` reads an index of the ``args`` column (signature -> records)
    kept beside it in the instance ``__dict__``: not a field, so never stored,
    built at first use after a decode and kept up to date by ``push``/``trim``
    (the only writers of ``args``). One dict probe instead of comparing every
    record's signature, each a cold string in a run's state.

    A record keeps its call id only while it is pending (no outcome yet): an outcome is
    matched to a pending record only (§6.3), so a complete record's id is never read again
    and is not kept (``None``), in memory or stored.
    """

    tools: list[str] = msgspec.field(default_factory=list)
    args: list[str] = msgspec.field(default_factory=list)
    call_ids: list[str | None] = msgspec.field(default_factory=list)
    results: list[str | None] = msgspec.field(default_factory=list)
    unknowns: list[str | None] = msgspec.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.args)

    def count(self, sig: str) -> int:
        """How many records of the window have signature ``sig``."""
        counts = self.__dict__.get("_counts")
        if counts is None:
            counts = self._index()
        return counts.get(sig, 0)

    def _index(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for sig in self.args:
            counts[sig] = counts.get(sig, 0) + 1
        self._counts = counts
        return counts

    def push(
        self, tool: str, args: str, call_id: str | None, result: str | None, unknown: str | None, size: int
    ) -> None:
        """Append a record, then drop the oldest beyond ``size`` (§6.2; §1.8: the size in force now)."""
        sigs = self.args
        counts = self.__dict__.get("_counts")
        if counts is not None:
            counts[args] = counts.get(args, 0) + 1
        if len(sigs) == size:  # a full window slides by one: the steady state, without trim()'s slices
            if counts is not None:
                oldest = sigs[0]
                left = counts[oldest] - 1
                if left:
                    counts[oldest] = left
                else:
                    del counts[oldest]
            del self.tools[0], sigs[0], self.call_ids[0], self.results[0], self.unknowns[0]
        self.tools.append(tool)
        sigs.append(args)
        self.call_ids.append(call_id)
        self.results.append(result)
        self.unknowns.append(unknown)
        if len(sigs) > size:
            self.trim(size)

    def trim(self, size: int) -> None:
        """Drop the oldest records beyond ``size`` (§6.2, §1.8: the size in force now)."""
        excess = len(self.args) - size
        if excess > 0:
            counts = self.__dict__.get("_counts")
            if counts is not None:
                for sig in self.args[:excess]:
                    left = counts[sig] - 1
                    if left:
                        counts[sig] = left
                    else:
                        del counts[sig]
            del self.tools[:excess], self.args[:excess], self.call_ids[:excess]
            del self.results[:excess], self.unknowns[:excess]


class RecordExtras(msgspec.Struct, array_like=True):
    """The record fields only the ``openclaw-latest`` profile reads (:mod:`loopwarden.detection.latest`).

    One list each, beside the history's columns (one entry per record, oldest first).
    Only the profile writes them and keeps them aligned; the engine without the profile
    drops them (``RunState.extras = None``) before it changes the history.
    """

    targets: list[str | None] = msgspec.field(default_factory=list)  # mutationTargetHash
    kinds: list[int] = msgspec.field(default_factory=list)  # outcome kind (latest_hashing.KIND_*)
    identities: list[str | None] = msgspec.field(default_factory=list)  # failureIdentityHash
    no_progress: list[bool] = msgspec.field(default_factory=list)

    @classmethod
    def blank(cls, n: int) -> RecordExtras:
        return cls([None] * n, [0] * n, [None] * n, [False] * n)

    def append(self, target: str | None, kind: int, identity: str | None, no_progress: bool) -> None:
        self.targets.append(target)
        self.kinds.append(kind)
        self.identities.append(identity)
        self.no_progress.append(no_progress)

    def drop_oldest(self, n: int) -> None:
        del self.targets[:n], self.kinds[:n], self.identities[:n], self.no_progress[:n]


class Guard(msgspec.Struct, array_like=True):
    """Post-compaction guard of one run (§10)."""

    remaining: int = 0
    window: list[tuple[str, str, str]] = msgspec.field(default_factory=list)
    aborted: bool = False


class RunUsage(msgspec.Struct, array_like=True):
    """What a run's calls cost, kept only once a call of the run carried ``usage``.

    ``tokens``/``costs`` run beside the history columns (one entry per record,
    oldest first; 0 once charged to a loop, so no call is charged twice).
    ``loops`` is each loop's charge so far (loop key -> [tokens, cost]);
    ``blocked`` maps a signature blocked in this run to (detector, loop key, shadow),
    so later calls to it are charged to that loop.
    """

    tokens: list[int] = msgspec.field(default_factory=list)
    costs: list[float] | None = None  # only once a call carried a cost
    loops: dict[str, list] = msgspec.field(default_factory=dict)
    blocked: dict[str, tuple[str, str, bool]] = msgspec.field(default_factory=dict)


class Awaited(msgspec.Struct, array_like=True):
    """A published warn/block/abort verdict whose ack has not arrived."""

    verdict_id: str
    action: str
    ts: float  # the worker's clock when it was published


class Enforcement(msgspec.Struct, array_like=True):
    """What the worker knows of a run's obedience (see :mod:`loopwarden.detection.enforcement`).

    Made at the run's first published verdict: runs without verdicts carry ``None``.
    """

    awaited: list[Awaited] = msgspec.field(default_factory=list)
    awaited_overflow: int = 0
    block_ids: dict[str, str] = msgspec.field(default_factory=dict)  # blocked call id -> its verdict id
    abort_id: str | None = None  # the run's (first) abort verdict
    violations: int = 0
    blocks: int = 0
    escalated: bool = False
    # Gated calls made after the abort: the runner refuses them (their results are the veto), so
    # each is judged by its result, not as a call_after_abort when it is asked. Last, optional:
    # states stored before it still decode.
    after_abort: list[str] = msgspec.field(default_factory=list)


def event_digest(event_id: str) -> bytes:
    """The form in which a run remembers an event id (``RunState.seen``)."""
    return blake2b(event_id.encode("utf-8", "surrogatepass"), digest_size=EVENT_DIGEST_SIZE).digest()


def find_digest(seen: bytes | bytearray, digest: bytes) -> int:
    """The byte position of ``digest`` in ``seen`` at a digest boundary, or -1: bytes that straddle
    two remembered digests are neither of them."""
    at = seen.find(digest)
    while at > 0 and at % EVENT_DIGEST_SIZE:
        at = seen.find(digest, at + 1)
    return at


class RunState(msgspec.Struct, array_like=True, dict=True):
    """One run's state.

    ``seen`` holds the digests (:func:`event_digest`) of the run's last ``MAX_SEEN_EVENT_IDS``
    event ids, oldest first, back to back in one bytearray: a duplicate check is one C-level
    search of 1 KiB, and the stored value carries one bytes object instead of 128 strings,
    which a worker decodes and encodes for every run a batch touches."""

    history: History = msgspec.field(default_factory=History)
    buckets: dict[str, int] = msgspec.field(default_factory=dict)
    guard: Guard = msgspec.field(default_factory=Guard)
    blocked: list[str] = msgspec.field(default_factory=list)
    seen: bytearray = msgspec.field(default_factory=bytearray)
    # Blocked calls without a call id: the run's next results without one are their vetoes.
    blocked_without_id: int = 0
    blocked_overflow: int = 0  # blocked call ids forgotten at MAX_BLOCKED_CALLS (never expected)
    # Fleet signatures (loopwarden.fleet) this run has joined; None = none. Not read by OpenClaw's rules.
    joined: list[str] | None = None
    # Verdict acks and obedience (loopwarden.detection.enforcement).
    enforcement: Enforcement | None = None
    usage: RunUsage | None = None
    # The openclaw-latest profile's record fields (None without the profile).
    extras: RecordExtras | None = None
    # The fleet side's failure fingerprint of each outcome hash in the window (result hash ->
    # fingerprint, loopwarden.fleet.fingerprint); None = none. Not read by OpenClaw's rules.
    prints: dict[str, str] | None = None

    def has_seen(self, event_id: str) -> bool:
        return find_digest(self.seen, event_digest(event_id)) >= 0

    def remember(self, event_id: str) -> None:
        """Note an applied event's id, forgetting the oldest beyond ``MAX_SEEN_EVENT_IDS``."""
        self._note(event_digest(event_id))

    def first_sight(self, event_id: str) -> bool:
        """Remember ``event_id`` and say True, or say False if the run has seen it (a duplicate)."""
        digest = event_digest(event_id)
        if find_digest(self.seen, digest) >= 0:
            return False
        self._note(digest)
        return True

    def _note(self, digest: bytes) -> None:
        seen = self.seen
        seen += digest
        excess = len(seen) - MAX_SEEN_EVENT_IDS * EVENT_DIGEST_SIZE
        if excess > 0:
            del seen[:excess]


class RunStateV2(msgspec.Struct, array_like=True):
    """The layout of format versions 1 and 2 (STATE.md), frozen: read, never written.

    Its nested Structs are today's while their layouts have not changed since version 2."""

    history: History = msgspec.field(default_factory=History)
    buckets: dict[str, int] = msgspec.field(default_factory=dict)
    guard: Guard = msgspec.field(default_factory=Guard)
    blocked: list[str] = msgspec.field(default_factory=list)
    seen: list[str] = msgspec.field(default_factory=list)
    blocked_without_id: int = 0
    blocked_overflow: int = 0
    joined: list[str] | None = None
    enforcement: Enforcement | None = None
    usage: RunUsage | None = None
    extras: RecordExtras | None = None

    def upgrade(self) -> RunState:
        """The same run in today's layout: event ids as digests, complete records without call ids."""
        h, x = self.history, self.extras
        pending_kinds = x.kinds if x is not None and len(x.kinds) == len(h.args) else [0] * len(h.args)
        h.call_ids = [
            call_id if result is None and not kind else None
            for call_id, result, kind in zip(h.call_ids, h.results, pending_kinds)
        ]
        state = RunState(
            h,
            self.buckets,
            self.guard,
            self.blocked,
            bytearray(),
            self.blocked_without_id,
            self.blocked_overflow,
            self.joined,
            self.enforcement,
            self.usage,
            x,
        )
        for event_id in self.seen:  # oldest first, as the run remembered them (and as many)
            state.remember(event_id)
        return state


_encoder = msgspec.msgpack.Encoder()

# The stored format (STATE.md). Every value starts with its version byte, 0x01-0x7f;
# version 1, written before versions existed, has none: it starts with a msgpack array
# (0x90-0x9f, 0xdc, 0xdd) or with the escape byte below, neither of which is a version.
FORMAT_VERSION = 4
_VERSION_BYTE = bytes([FORMAT_VERSION])
_LAST_VERSION_BYTE = 0x7F

# Names and ids are kept as sent, so a state may hold lone surrogates, which
# msgpack strings (UTF-8) cannot. Such a state is written with every string
# as its UTF-8-with-surrogates bytes read as Latin-1 (exact and reversible),
# behind a 0x00 byte that no msgpack array (a Struct) starts with.
_ESCAPED = b"\x00"


class UnknownFormatVersion(msgspec.DecodeError):
    """A stored value of a format version this code cannot read: written by a newer loopwarden.

    A ``DecodeError``, so every reader that survives an undecodable value survives this one;
    the worker tells the two apart in its log and metrics."""

    def __init__(self, version: int) -> None:
        super().__init__(f"stored format version {version}; this loopwarden reads versions 1 to {FORMAT_VERSION}")
        self.version = version


def expect_veto(state: RunState, tool_call_id: str | None, limit: int = MAX_BLOCKED_CALLS) -> None:
    """Note a refused call: its result is the veto (an id-less one matches the run's next id-less result).

    Every block does this, the engine's and the fleet response's alike."""
    if tool_call_id:
        blocked = state.blocked
        blocked.append(tool_call_id)
        if len(blocked) > limit:
            del blocked[0]
            state.blocked_overflow += 1
    else:
        state.blocked_without_id += 1


def _map_strings(value: Any, fn: Any) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return [_map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {_map_strings(k, fn): _map_strings(v, fn) for k, v in value.items()}
    return value


def _escape(text: str) -> str:
    return text.encode("utf-8", "surrogatepass").decode("latin-1")


def _unescape(text: str) -> str:
    return text.encode("latin-1").decode("utf-8", "surrogatepass")


class StoredCodec:
    """The readers of one stored type: today's layout, and the frozen layout of versions 1-2
    (whose ``upgrade()`` gives today's value). One per type: :data:`STATE_CODEC` here, the
    worker's run value beside its Struct."""

    def __init__(self, type_: type, legacy: type) -> None:
        self.type = type_
        self.legacy = legacy
        self.decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(type_)
        self.legacy_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(legacy)


def pack(value: msgspec.Struct, encoder: msgspec.msgpack.Encoder = _encoder) -> bytes:
    """A Struct's stored form in the current format: the version byte, then its msgpack.

    Total: a value holding lone surrogates is written escaped (see ``_ESCAPED``); normal ones stay plain."""
    try:
        return _VERSION_BYTE + encoder.encode(value)
    except UnicodeEncodeError:
        plain = msgspec.to_builtins(value, builtin_types=(bytes, bytearray))  # digests stay binary
        return _VERSION_BYTE + _ESCAPED + encoder.encode(_map_strings(plain, _escape))


def stored_version(raw: bytes) -> int:
    """The format version of a stored value: its first byte if that is a version byte, else 1."""
    head = raw[0] if raw else 0
    return head if 0 < head <= _LAST_VERSION_BYTE else 1


def unpack(raw: bytes, codec: StoredCodec) -> Any:
    """The inverse of :func:`pack`, for every version this code reads (raises :class:`UnknownFormatVersion`).

    Versions 1 and 2 share one layout (2 only added the version byte), read by the codec's
    legacy Struct and upgraded; version 3 is today's layout without its last slot (``prints``),
    read by today's Struct at that slot's default; version 4 is today's (STATE.md)."""
    head = raw[0] if raw else 0
    body: bytes | memoryview
    if 0 < head <= _LAST_VERSION_BYTE:  # a version byte
        if head > FORMAT_VERSION:
            raise UnknownFormatVersion(head)
        body = memoryview(raw)[1:]
    else:  # version 1: no version byte
        body = raw
    current = 3 <= head <= FORMAT_VERSION  # version 3 is a prefix of today's layout
    if body[:1] == _ESCAPED:
        plain = _map_strings(msgspec.msgpack.decode(body[1:]), _unescape)
        return msgspec.convert(plain, codec.type) if current else msgspec.convert(plain, codec.legacy).upgrade()
    return codec.decoder.decode(body) if current else codec.legacy_decoder.decode(body).upgrade()


STATE_CODEC = StoredCodec(RunState, RunStateV2)


def encode_state(state: RunState) -> bytes:
    """A run's state in the current stored format (every slot written, ``None`` ones too)."""
    return pack(state)


def decode_state(raw: bytes) -> RunState:
    """A stored run state of any version this code reads (:func:`unpack`)."""
    return unpack(raw, STATE_CODEC)
