"""Canonical serialization and digests, byte for byte as OpenClaw's stable stringify (§2).

Two paths that give the same string:

- :func:`canonical_slow` walks the value in Python and implements every rule
  (JavaScript number formatting, UTF-16 key order, unpaired surrogates removed).
- :func:`canonical_bytes` (the engine's hot path) lets msgspec encode with
  sorted keys (its escaping already matches ``JSON.stringify``) and falls back
  to the slow path only when the output could differ: a non-BMP character
  (UTF-16 key order differs from code-point order), a run of 16+ digits (an
  integer above 2**53 that JavaScript would round), or an encode error (lone
  surrogates). It expects values as :mod:`loopwarden.schemas.jsvalues` decodes them:
  numbers are ints or :class:`JsFloat` (formatted by the ``enc_hook``), never
  plain floats.
- :func:`canonical` and :func:`digest` take any JSON-shaped Python value:
  they also fall back when msgspec printed a plain float its own way.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable

import msgspec

from loopwarden.schemas.jsvalues import JsFloat, js_double

Normalizer = Callable[[str], str] | None

_SAFE = 2**53
# One C-speed pass classifies the fast path's output: digits -> "0",
# UTF-8 lead bytes of non-BMP characters -> "!", everything else -> " ".
_CLASSIFY = bytes(48 if 48 <= b <= 57 else 33 if 0xF0 <= b <= 0xF4 else 32 for b in range(256))
_LONG_DIGITS = b"0" * 16  # an integer of 16+ digits may exceed 2**53


class Undefined:
    """The bare token ``undefined`` inside internally built objects (§2.1)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED = Undefined()


def js_number(value: float | int) -> str:
    """``Number.prototype.toString`` for a double (ECMAScript Number::toString)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if -_SAFE <= value <= _SAFE:
            return str(value)
        value = js_double(value)  # the nearest double, or ±Infinity beyond the range (like JSON.parse)
    if value != value:
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exp = repr(abs(value)).partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    if frac_part == "0":
        frac_part = ""
    digits = (int_part + frac_part).lstrip("0")
    # value = 0.<digits> * 10**n
    n = (
        len(int_part.lstrip("0")) + int(exp or 0)
        if int_part != "0"
        else int(exp or 0) - (len(frac_part) - len(frac_part.lstrip("0")))
    )
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        exp_text = ("+" if e >= 0 else "-") + str(abs(e))
        out = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + exp_text
    return sign + out


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _escape_char(match: re.Match) -> str:
    ch = match.group(0)
    return _ESCAPES.get(ch) or "\\u%04x" % ord(ch)


def _well_formed(text: str) -> str:
    """Join surrogate pairs and drop unpaired surrogates (§2.2)."""
    if not _SURROGATE.search(text):
        return text
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return _SURROGATE.sub("", joined)


def js_string(text: str) -> str:
    """``JSON.stringify`` for a string, with non-ASCII left raw."""
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, _well_formed(text)) + '"'


_NEEDS_ESCAPE_OR_LONE = re.compile(r'["\\\x00-\x1f\ud800-\udfff]')


def js_string_escaped(text: str) -> str:
    """Well-formed ``JSON.stringify`` (the ``openclaw-latest`` profile): a lone surrogate is
    written as ``\\udxxx`` (lowercase hex) instead of being dropped; pairs are joined first."""
    if _SURROGATE.search(text):
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return '"' + _NEEDS_ESCAPE_OR_LONE.sub(_escape_char, text) + '"'


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def canonical_slow(value: object, quote: Callable[[str], str] = js_string, normalize: Normalizer = None) -> str:
    """Reference implementation of §2.1-§2.6 for JSON-shaped values.

    ``quote`` writes a string (:func:`js_string_escaped` for the newest revision's
    surrogate rule); ``normalize``, when given, rewrites every string value and
    object key before quoting, and keys sort by their normalized form, the raw
    key breaking ties (the newest revision's outcome digests).
    """
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return quote(value if normalize is None else normalize(value))
    if isinstance(value, (int, float)):
        if isinstance(value, int) and not -_SAFE <= value <= _SAFE:
            value = js_double(value)  # may be ±Infinity (§2.3): a quoted string then
        if isinstance(value, float) and not math.isfinite(value):
            return quote(js_number(value))
        return js_number(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical_slow(v, quote, normalize) for v in value) + "]"
    if isinstance(value, dict):
        if normalize is None:
            keys = sorted(value, key=_utf16_key)
            return "{" + ",".join(quote(k) + ":" + canonical_slow(value[k], quote) for k in keys) + "}"
        pairs = sorted(((normalize(k), k) for k in value), key=lambda p: (_utf16_key(p[0]), _utf16_key(p[1])))
        return "{" + ",".join(quote(n) + ":" + canonical_slow(value[k], quote, normalize) for n, k in pairs) + "}"
    if value is UNDEFINED:
        return "undefined"
    raise TypeError(f"cannot serialize {type(value).__name__}")


def _enc_hook(obj: object) -> object:
    if isinstance(obj, JsFloat):
        text = js_number(obj)
        return msgspec.Raw((text if math.isfinite(obj) else js_string(text)).encode())
    if obj is UNDEFINED:
        return msgspec.Raw(b"undefined")
    raise TypeError(f"cannot serialize {type(obj).__name__}")


_encoder = msgspec.json.Encoder(enc_hook=_enc_hook, order="sorted")


def _fast(value: object) -> bytes | None:
    """msgspec's output when it is certainly canonical for a decoded value, else None."""
    try:
        out = _encoder.encode(value)
    except (UnicodeEncodeError, TypeError, OverflowError):
        return None
    classes = out.translate(_CLASSIFY)
    # find() skips ~17 bytes at a time through the non-digit classes: cheaper than counting digits first.
    if classes.find(_LONG_DIGITS) < 0 and (out.isascii() or classes.find(33) < 0):
        return out
    return None


canonical_fast = _fast  # for the other serializers of the package (latest_hashing)


def canonical_bytes(value: object) -> bytes:
    """UTF-8 canonical form of a value decoded by loopwarden (no plain floats)."""
    out = _fast(value)
    return out if out is not None else canonical_slow(value).encode("utf-8")


def digest_decoded(value: object) -> str:
    """:func:`digest` for values decoded by loopwarden (the hot path)."""
    return hashlib.sha256(canonical_bytes(value)).hexdigest()


# msgspec prints plain floats as ``50.0``, ``-0.0``, ``1e-7``, ``1e16``.
_PLAIN_FLOAT = re.compile(rb"\d\.0(?![0-9])|\de[-+0-9]")


def canonical(value: object) -> str:
    """The canonical form of any JSON-shaped Python value (§2)."""
    out = _fast(value)
    if out is not None and _PLAIN_FLOAT.search(out) is None:
        return out.decode("utf-8")
    return canonical_slow(value)


def digest(value: object) -> str:
    """Lowercase hex SHA-256 of the canonical form (§2.8), for any JSON-shaped value."""
    return hashlib.sha256(canonical(value).encode("utf-8")).hexdigest()
