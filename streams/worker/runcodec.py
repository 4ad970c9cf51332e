"""Keys and values of the run table (RocksDB, changelogged), encoded with msgspec.

Key: the JSON array ``[agent id, session key, run scope]`` (:func:`loopwarden.schemas.events.state_key`:
run id trimmed the JavaScript way; ``""`` for calls outside a run), with the origin as a fourth part for a
run loopwarden only watches (``origin: "otel"``: it never shares a runner's run state). Keys written before the agent id
was part of them, ``[session key, run scope]`` (:func:`legacy_key`), are read when a run has no value
under its new key: the batch path moves such a value to the new key (and deletes the old one) at the
run's next event, so a worker upgraded in place keeps its in-flight runs. Value: :class:`RunValue` in the run state's
versioned stored format (``streams/detection/STATE.md``: a version byte, then msgpack): the engine's
:class:`RunState` plus what the worker needs around it: the last applied
offset of the source partition (replayed events at or below it are skipped,
so an event is applied once) and the wall time of the last event (idle
runs expire). ``state is None`` marks an ended run; the marker stays for
``ended_ttl`` so a replay of its events after a crash is still skipped.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from loopwarden.detection import RunState
from loopwarden.detection.state import RunStateV2, StoredCodec, pack, unpack
from loopwarden.schemas.events import Event, legacy_state_key
from loopwarden.schemas.events import state_key as event_state_key
from loopwarden.schemas.extensions import OBSERVED_ORIGINS
from loopwarden.schemas.jsvalues import js_loads_slow, json_bytes


class RunValue(msgspec.Struct, array_like=True):
    offset: int
    touched: float
    state: RunState | None = None


class RunValueV2(msgspec.Struct, array_like=True):
    """A run value of format versions 1 and 2 (the state in their layout): read, never written."""

    offset: int
    touched: float
    state: RunStateV2 | None = None

    def upgrade(self) -> RunValue:
        return RunValue(self.offset, self.touched, None if self.state is None else self.state.upgrade())


_key_decoder = msgspec.json.Decoder(tuple[str, ...])
_value_encoder = msgspec.msgpack.Encoder()
_VALUE_CODEC = StoredCodec(RunValue, RunValueV2)


def state_key(event: Event) -> bytes:
    """The table key: the same (agent, session key, run scope) replay uses, as JSON bytes (lone surrogates
    escaped)."""
    return json_bytes(event_state_key(event))


def legacy_key(event: Event) -> bytes:
    """The table key of this run written by a worker from before the agent id was part of it."""
    return json_bytes(legacy_state_key(event))


def decode_key(raw: bytes) -> tuple[str, ...]:
    """A table key's parts: (agent, session key, run scope), or (session key, run scope) for a legacy key."""
    try:
        return _key_decoder.decode(raw)
    except msgspec.DecodeError:  # a lone surrogate escape (json_bytes)
        return tuple(js_loads_slow(raw))


def encode_value(value: RunValue) -> bytes:
    return pack(value, _value_encoder)  # total: a state may hold lone surrogates (names taken as sent)


def decode_value(raw: bytes) -> RunValue:
    """Any version this worker reads; a newer one raises ``UnknownFormatVersion`` (a ``msgspec.DecodeError``)."""
    return unpack(raw, _VALUE_CODEC)


def adopt_legacy(
    read: Callable[[int, bytes], RunValue | None],
    partition: int,
    event: Event,
    slot: tuple[int, bytes],
    writes: dict[tuple[int, bytes], RunValue | None],
) -> RunValue | None:
    """The run's value under its :func:`legacy_key`, moved to its new key in ``writes`` (the old key
    deleted there), or None. Moved at once, so a replayed event skipped on the value's offset does not
    leave the run without its state."""
    if event.origin in OBSERVED_ORIGINS:
        return None  # a legacy key names a runner's run: a watched run never takes its state
    old = (partition, legacy_key(event))
    value = read(*old)
    if value is not None:
        writes[slot] = value
        writes[old] = None
    return value
