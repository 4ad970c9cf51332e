"""From raw JSON payloads to hashes, memoized on the payload bytes.

Decoding a payload into Python objects costs more than everything else the
engine does for an event, and loops are, by definition, the same bytes again
and again (a tool result also repeats its call's params). So the signature of
a call and the outcome hash of a result are pure functions of (tool, bytes)
and are cached; only payloads up to :data:`CACHEABLE_BYTES` are kept, so the
cache's memory stays bounded (about CACHE_ENTRIES x CACHEABLE_BYTES at most).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

import msgspec
from msgspec import Raw

from schemas.jsvalues import js_float
from streams.detection.canonical import digest_decoded
from streams.detection.hashing import args_hash, error_text, result_hash, result_mode, unknown_tool_name
from streams.detection.tools import is_known_poll

CACHEABLE_BYTES = 4096
CACHE_ENTRIES = 16384

_decoder = msgspec.json.Decoder(float_hook=js_float)


def load(raw: bytes | Raw) -> Any:
    """Decode a payload with JavaScript number semantics (:mod:`schemas.jsvalues`)."""
    return _decoder.decode(raw)


class CallInfo(NamedTuple):
    """What the rules need to know about a call's params."""

    sig: str  # argsHash (§3)
    known_poll: bool  # §7.5
    mode: str  # how its result is hashed (hashing.result_mode)


def _call_info(tool: str, raw: bytes) -> CallInfo:
    params = _decoder.decode(raw)
    return CallInfo(args_hash(tool, params), is_known_poll(tool, params), result_mode(tool, params))


def _result_hash(tool: str, mode: str, raw: bytes) -> str | None:
    return result_hash(tool, mode, _decoder.decode(raw))


def _error_outcome(raw: bytes) -> tuple[str, str | None]:
    text = error_text(_decoder.decode(raw))
    return "error:" + digest_decoded(text), unknown_tool_name(text)


_cached_call_info = lru_cache(maxsize=CACHE_ENTRIES)(_call_info)
_cached_result_hash = lru_cache(maxsize=CACHE_ENTRIES)(_result_hash)
_cached_error_outcome = lru_cache(maxsize=CACHE_ENTRIES)(_error_outcome)


def call_info(tool: str, raw: bytes) -> CallInfo:
    if len(raw) <= CACHEABLE_BYTES:
        return _cached_call_info(tool, raw)
    return _call_info(tool, raw)


def outcome(tool: str, mode: str, result: bytes | None, error: bytes | None) -> tuple[str | None, str | None]:
    """(resultHash, unknownToolName) per §4.1-§4.9; (None, None) when nothing is recorded."""
    if error is not None:
        return _cached_error_outcome(error) if len(error) <= CACHEABLE_BYTES else _error_outcome(error)
    if result is None:
        return None, None
    tool = tool if tool == "exec" else ""  # result_hash reads the tool only for exec
    if len(result) <= CACHEABLE_BYTES:
        return _cached_result_hash(tool, mode, result), None
    return _result_hash(tool, mode, result), None


def clear_caches() -> None:
    """Forget memoized hashes (benchmarks start cold)."""
    _cached_call_info.cache_clear()
    _cached_result_hash.cache_clear()
    _cached_error_outcome.cache_clear()
