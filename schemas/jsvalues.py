"""JSON values as JavaScript sees them.

OpenClaw parses JSON into IEEE doubles, so ``50.0`` and ``50`` are the same
value and ``-0`` prints as ``0``. The decoder's ``float_hook`` folds every
integral float below 2**53 into an ``int`` and keeps the rest as
:class:`JsFloat`, a ``float`` whose JSON form is JavaScript's (the canonical
serializer formats it through an ``enc_hook``). Values decoded this way hash
exactly like OpenClaw's.
"""

from __future__ import annotations

import re
from typing import Any

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


_SURROGATES = re.compile("[\ud800-\udfff]")


def drop_lone_surrogates(value: Any) -> Any:
    """Remove unpaired UTF-16 surrogates from every string (keys included)."""
    if isinstance(value, str):
        if not _SURROGATES.search(value):
            return value
        joined = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return _SURROGATES.sub("", joined)
    if isinstance(value, list):
        return [drop_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {drop_lone_surrogates(k): drop_lone_surrogates(v) for k, v in value.items()}
    return value
