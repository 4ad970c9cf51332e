"""JSON values as JavaScript sees them.

OpenClaw parses JSON into IEEE doubles, so ``50.0`` and ``50`` are the same
value and ``-0`` prints as ``0``. The decoder's ``float_hook`` folds every
integral float below 2**53 into an ``int`` and keeps the rest as
:class:`JsFloat`, a ``float`` whose JSON form is JavaScript's (the canonical
serializer formats it through an ``enc_hook``). Values decoded this way hash
exactly like OpenClaw's.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

_SAFE = 2**53


class JsFloat(float):
    """A float that must be printed the JavaScript way (not msgspec's)."""

    __slots__ = ()


def js_float(text: str) -> int | float:
    """``float_hook`` for msgspec: JSON float literal -> int or JsFloat."""
    value = float(text)
    if value.is_integer() and -_SAFE < value < _SAFE:
        return int(value)
    return JsFloat(value)


# JavaScript's String.prototype.trim set (WhiteSpace + LineTerminator); Python's
# str.strip() differs (it keeps U+FEFF, drops U+001C-U+001F and U+0085).
JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(text: str) -> str:
    """``String.prototype.trim``."""
    return text.strip(JS_WHITESPACE)


def is_blank(line: str | bytes) -> bool:
    """Empty after JavaScript's ``trim()`` (U+00A0, U+2028, a BOM … are blank too): skipped, not counted."""
    if isinstance(line, bytes):
        stripped = line.strip()  # ASCII whitespace, all of it in trim()'s set
        if not stripped or stripped.isascii():
            return not stripped
        line = stripped.decode("utf-8", "replace")
    return not js_trim(line)


_SURROGATES = re.compile("[\ud800-\udfff]")


def to_well_formed(text: str) -> str:
    """``String.prototype.toWellFormed``: lone surrogates become U+FFFD (what UTF-8 encoders write)."""
    if not _SURROGATES.search(text):
        return text
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _SURROGATES.sub("\ufffd", joined)


def js_double(value: int) -> int | float:
    """An integer literal as ``JSON.parse`` reads it: a double, ``±Infinity`` beyond the range.

    Integers up to 2**53 are exact and stay ``int``; larger ones round to the
    nearest double (a :class:`JsFloat`, so it prints the JavaScript way).
    """
    if -_SAFE <= value <= _SAFE:
        return value
    try:
        return JsFloat(value)
    except OverflowError:
        return JsFloat("inf" if value > 0 else "-inf")


def js_int(text: str) -> int | float:
    """``parse_int`` for Python's json: exact ints, except literals too long to be finite doubles.

    Python refuses to build ints of more than 4300 digits; any literal above
    309 digits is ±Infinity in JavaScript anyway.
    """
    if len(text) < 300:
        return int(text)
    return js_double(int(text)) if len(text) < 4000 else JsFloat(text)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Python's json module reads JSON as JSON.parse does except for NaN/Infinity
# (rejected here) and lone surrogate escapes (kept, as JavaScript keeps them).
_JSON = json.JSONDecoder(parse_float=js_float, parse_int=js_int, parse_constant=_reject_constant)


def js_loads_slow(text: str | bytes) -> Any:
    """``JSON.parse`` semantics where msgspec refuses the text (lone surrogate escapes).

    Numbers come out as :func:`js_float` makes them (ints stay exact; the
    canonical form rounds them). Raises ``ValueError`` for what is not JSON.
    """
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode("utf-8")
    return _JSON.decode(text)


def _escape_surrogates(text: str) -> str:
    return _SURROGATES.sub(lambda m: "\\u%04x" % ord(m.group()), text)


def _dump(value: Any, out: list[bytes]) -> None:
    """:func:`json_bytes`'s slow path over builtins: msgspec per leaf, escapes for surrogates."""
    if isinstance(value, str):
        try:
            out.append(_fast_encoder.encode(value))
        except UnicodeEncodeError:
            out.append(_escape_surrogates(json.dumps(value, ensure_ascii=False)).encode("utf-8"))
    elif isinstance(value, dict):
        out.append(b"{")
        for i, (k, v) in enumerate(value.items()):
            if i:
                out.append(b",")
            _dump(k, out)
            out.append(b":")
            _dump(v, out)
        out.append(b"}")
    elif isinstance(value, (list, tuple)):
        out.append(b"[")
        for i, v in enumerate(value):
            if i:
                out.append(b",")
            _dump(v, out)
        out.append(b"]")
    else:  # numbers, booleans, null, Raw: exactly as msgspec writes them
        out.append(_fast_encoder.encode(value))


_fast_encoder = msgspec.json.Encoder()


def json_bytes(obj: Any) -> bytes:
    """msgspec's JSON encoding, made total: lone surrogates become ``\\udXXX`` escapes.

    msgspec cannot encode a string holding a lone surrogate (it has no UTF-8
    form); JavaScript's ``JSON.stringify`` writes it as an escape, and so does
    this fallback. Normal input never leaves the fast path.
    """
    try:
        return _fast_encoder.encode(obj)
    except UnicodeEncodeError:
        pass
    out: list[bytes] = []
    _dump(msgspec.to_builtins(obj, builtin_types=(msgspec.Raw,)), out)
    return b"".join(out)
