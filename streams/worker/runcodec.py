"""Keys and values of the run table (RocksDB, changelogged), encoded with msgspec.

Key: the JSON array ``[session key, run scope]`` (:func:`loopwarden.schemas.events.state_key`:
run id trimmed the JavaScript way; ``""`` for calls outside a run). Value: :class:`RunValue` in the run state's
versioned stored format (``streams/detection/STATE.md``: a version byte, then msgpack): the engine's
:class:`RunState` plus what the worker needs around it: the last applied
offset of the source partition (replayed events at or below it are skipped,
so an event is applied once) and the wall time of the last event (idle
runs expire). ``state is None`` marks an ended run; the marker stays for
``ended_ttl`` so a replay of its events after a crash is still skipped.
"""

from __future__ import annotations

import msgspec

from loopwarden.detection import RunState
from loopwarden.detection.state import pack, unpack
from loopwarden.schemas.events import Event
from loopwarden.schemas.events import state_key as event_state_key
from loopwarden.schemas.jsvalues import js_loads_slow, json_bytes


class RunValue(msgspec.Struct, array_like=True):
    offset: int
    touched: float
    state: RunState | None = None


_key_decoder = msgspec.json.Decoder(tuple[str, str])
_value_encoder = msgspec.msgpack.Encoder()
_value_decoder = msgspec.msgpack.Decoder(RunValue)


def state_key(event: Event) -> bytes:
    """The table key: the same (session key, run scope) replay uses, as JSON bytes (lone surrogates escaped)."""
    return json_bytes(event_state_key(event))


def decode_key(raw: bytes) -> tuple[str, str]:
    try:
        return _key_decoder.decode(raw)
    except msgspec.DecodeError:  # a lone surrogate escape (json_bytes)
        session, scope = js_loads_slow(raw)
        return session, scope


def encode_value(value: RunValue) -> bytes:
    return pack(value, _value_encoder)  # total: a state may hold lone surrogates (names taken as sent)


def decode_value(raw: bytes) -> RunValue:
    """Any version this worker reads; a newer one raises ``UnknownFormatVersion`` (a ``msgspec.DecodeError``)."""
    return unpack(raw, _value_decoder, RunValue)
