"""Bounds every reader of Kafka records applies, defined once.

Nesting: decoders recurse (msgspec, Python's ``json``, ``pyjson5``), so JSON nested a
thousand deep raises ``RecursionError`` where a reader expects a decode error: 2 KB of
``[`` stopped a reader. Every JSON a reader takes from a topic is bounded by
:func:`too_deep` first, linear in its size and in C, whatever its shape.
Identifier caps (tool names, ids) are :data:`loopwarden.schemas.events.ID_CAPS`.
"""

from __future__ import annotations

from itertools import accumulate

MAX_DEPTH = 64  # arrays/objects nested deeper than this are refused (events, config records, spans' JSON)

_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [{ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}.get(b, 0) for b in range(256)]


def nesting_depth(raw: bytes) -> int:
    """Exact max nesting depth of JSON arrays/objects in ``raw`` (strings ignored); linear in its size.

    Escape pairs go first (left to right, as JSON pairs them), so every remaining quote opens or
    closes a string and the text outside strings is every other piece between quotes.
    """
    text = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = b"".join(text.split(b'"')[::2]).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets), initial=0))


def too_deep(raw: bytes, limit: int = MAX_DEPTH) -> int | None:
    """The nesting depth of ``raw`` if it is over ``limit``, else None.

    The count of ``[`` and ``{`` bytes bounds the depth from above, so only a text with more
    brackets than ``limit`` is measured exactly (:func:`nesting_depth`). Strings quoted otherwise
    than JSON's (JSON5's single quotes, comments) may only make the measure larger, never smaller.
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return None
    depth = nesting_depth(raw)
    return depth if depth > limit else None
