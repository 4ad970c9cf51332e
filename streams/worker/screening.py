"""Screening of raw event bytes and the dead-letter record.

Size is checked before decoding (a huge value never reaches the parser).
Depth is bounded cheaply: the count of ``[`` and ``{`` bytes is an upper
bound of the nesting depth; only when that bound exceeds the limit is the
precise depth computed (escape pairs dropped, strings cut out at their
quotes, brackets summed). Every step runs in C and is linear in the record's
size whatever its shape; a regular expression for strings was not (a
string left open retried from every escaped quote in it: quadratic on a
run of ``\\"``). On valid JSON the depth is exact. ``loopwarden bench
screening`` measures the cost per KB of hostile shapes.

A dead letter's value is :class:`loopwarden.schemas.verdicts.DeadLetter` encoded as
JSON: ``{"reason", "detail", "topic", "partition", "offset", "raw", "size", "sha256"}``
with ``raw`` the record's first bytes in base64 (msgspec's JSON form of ``bytes``), ``size``
and ``sha256`` those of the whole record; its key is the original message key.
"""

from __future__ import annotations

from typing import Any

import msgspec

from loopwarden.schemas.bounds import nesting_depth
from loopwarden.schemas.events import Event, EventDecodeError, decode_event
from loopwarden.schemas.jsvalues import json_bytes
from loopwarden.schemas.verdicts import DeadLetter, dead_letter


def screen(raw: bytes | None, max_bytes: int, max_depth: int) -> Event:
    """Decode ``raw`` into an event or raise :class:`EventDecodeError`.

    Extra reasons beside the decoder's: ``empty`` (null/tombstone value),
    ``too_large``, ``too_deep``.
    """
    if raw is None or not raw:
        raise EventDecodeError("empty", "message has no value")
    if len(raw) > max_bytes:
        raise EventDecodeError("too_large", f"{len(raw)} bytes > limit {max_bytes}")
    if raw.count(b"[") + raw.count(b"{") > max_depth:
        depth = nesting_depth(raw)
        if depth > max_depth:
            raise EventDecodeError("too_deep", f"nesting depth {depth} > limit {max_depth}")
    return decode_event(raw)


def dead_letter_value(error: EventDecodeError, topic: str, partition: int, offset: int, raw: bytes | None) -> bytes:
    return json_bytes(dead_letter(error.reason, error.detail, topic, partition, offset, raw))


_dead_letter_decoder = msgspec.json.Decoder(DeadLetter)


def without_raw(out: Any) -> Any:
    """The same dead letter without its raw bytes (for one too large to publish whole); None if not one."""
    try:
        letter = _dead_letter_decoder.decode(out.value)
    except msgspec.DecodeError:
        return None
    if not letter.raw:
        return None
    note = f" [raw bytes omitted: {letter.size or len(letter.raw)} bytes do not fit the dead-letter topic]"
    smaller = msgspec.structs.replace(letter, raw=b"", detail=(letter.detail + note)[:2000])
    return msgspec.structs.replace(out, value=json_bytes(smaller))
