"""JSON-RPC frames as the proxy reads them: only the head of a frame, the rest left as raw bytes.

The proxy forwards every frame as the bytes it received; it decodes a frame's head (its ``id``
and ``method``, with ``params``/``result``/``error`` kept raw) only where it must decide
(``tools/call`` and the response to it, ``initialize`` for who the host is, ``tools/list`` for
the tools' output schemas). msgspec decodes a head in one linear pass and never builds the
skipped parts; a frame that is not one JSON-RPC object (a batch, garbage) has no head and is
forwarded untouched.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Raw

EMPTY = Raw(b"")


class Head(msgspec.Struct):
    """A frame's routing fields; an absent raw field is empty (``len(raw) == 0``)."""

    id: Raw = EMPTY
    method: str | None = None
    params: Raw = EMPTY
    result: Raw = EMPTY
    error: Raw = EMPTY


_head = msgspec.json.Decoder(Head)


def peek(frame: bytes) -> Head | None:
    """The frame's head, or None when it is not a JSON-RPC object."""
    try:
        return _head.decode(frame)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def decode(raw: Raw) -> Any:
    """A raw part of a frame as Python values (None when empty or not JSON)."""
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None


def response(request_id: Raw, result: Any) -> bytes:
    """A JSON-RPC response frame carrying ``result``, with the request's id exactly as it came."""
    return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "result": result})
