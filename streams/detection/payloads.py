"""From raw JSON payloads to hashes, memoized on the payload bytes.

Decoding a payload into Python objects costs more than everything else the
engine does for an event, and loops are, by definition, the same bytes again
and again (a tool result also repeats its call's params). The signature of a
call and the outcome hash of a result are pure functions of (tool, mode,
bytes), so they are memoized. Only payloads up to :data:`CACHEABLE_BYTES` are
kept and each memo holds at most :data:`CACHE_ENTRIES`, so memory stays
bounded (3 x 8192 x 2 KiB at the very worst).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import msgspec
from msgspec import Raw

from loopwarden.detection.canonical import digest_decoded
from loopwarden.detection.hashing import args_hash, error_text, result_hash, result_mode, unknown_tool_name
from loopwarden.detection.tools import is_known_poll
from loopwarden.schemas.jsvalues import js_float, js_loads_slow

CACHEABLE_BYTES = 2048
CACHE_ENTRIES = 8192

_decoder = msgspec.json.Decoder(float_hook=js_float)


def load(raw: bytes | Raw) -> Any:
    """Decode a payload with JavaScript number semantics (:mod:`loopwarden.schemas.jsvalues`).

    msgspec refuses lone surrogate escapes (``"\\ud800"``) that ``JSON.parse``
    keeps; such payloads (already accepted by the event decoder) take the
    slow path, surrogates kept: the rules see them, only digests drop them (§9.1).
    """
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError:
        return js_loads_slow(bytes(raw))


# Memo keys and values are gc=False Structs (only strings, bytes and flags inside, so no cycles):
# they are neither tracked nor counted by the cyclic GC. Tuples would be, and thousands of them
# surviving in the memos triggered several times more collections (about 6% of the engine's time).


class CallInfo(msgspec.Struct, frozen=True, gc=False):
    """What the rules need to know about a call's params."""

    sig: str  # argsHash (§3)
    known_poll: bool  # §7.5
    mode: str  # how its result is hashed (hashing.result_mode)


class Outcome(msgspec.Struct, frozen=True, gc=False):
    """(resultHash, unknownToolName) of a result or an error; ``result_hash`` None: not recorded."""

    result_hash: str | None
    unknown: str | None


class CallKey(msgspec.Struct, frozen=True, gc=False):
    """The calls memo's key: a signature starts with the tool name, so the tool is part of it."""

    tool: str
    raw: bytes


class ResultKey(msgspec.Struct, frozen=True, gc=False):
    """The results memo's key: the tool only where the rules hash its results differently
    (``Hasher.result_tools``), "" for every other tool."""

    tool: str
    mode: str
    result: bytes


_NOTHING = Outcome(None, None)


def call_info(tool: str, raw: bytes) -> CallInfo:
    params = load(raw)
    return CallInfo(args_hash(tool, params), is_known_poll(tool, params), result_mode(tool, params))


def result_outcome(tool: str, mode: str, raw: bytes) -> Outcome:
    """(resultHash, no name) of a result without error (§4.2-§4.9)."""
    return Outcome(result_hash(tool, mode, load(raw)), None)


def error_outcome(raw: bytes) -> Outcome:
    """(resultHash, unknownToolName) of a thrown error (§4.1, §5)."""
    text = error_text(load(raw))
    return Outcome("error:" + digest_decoded(text), unknown_tool_name(text))


class Memo:
    """A bounded memo, emptied wholesale when full.

    Cheaper per hit and per miss than an LRU's bookkeeping; a loop that is
    still going re-fills its entry on its next repeat.
    """

    __slots__ = ("entries", "limit")

    def __init__(self, limit: int = CACHE_ENTRIES) -> None:
        self.entries: dict[Any, Any] = {}
        self.limit = limit

    def put(self, key: Any, size: int, value: Any) -> Any:
        if size <= CACHEABLE_BYTES:
            if len(self.entries) >= self.limit:
                self.entries.clear()
            self.entries[key] = value
        return value


class Hasher:
    """A rule set's payload hashing behind three bounded memos keyed on the payload bytes.

    ``call(tool, raw)`` gives a call's info, ``result(tool, mode, raw)`` and ``error(raw)`` an
    outcome (a result's rules read the tool only for ``result_tools``, so other tools share entries);
    ``nothing`` is the outcome of a call that has neither. OpenClaw's rules (:data:`HASHER`) and the
    ``openclaw-latest`` profile's (``latest_hashing.LATEST_HASHER``) are two instances.
    """

    __slots__ = ("calls", "results", "errors", "result_tools", "_call", "_result", "_error", "_nothing")

    def __init__(
        self,
        call: Callable[[str, bytes], Any],
        result: Callable[[str, str, bytes], Any],
        error: Callable[[bytes], Any],
        nothing: Any,
        result_tools: Collection[str],
    ) -> None:
        self.calls = Memo()
        self.results = Memo()
        self.errors = Memo()
        self.result_tools = frozenset(result_tools)
        self._call, self._result, self._error, self._nothing = call, result, error, nothing

    def result_key(self, tool: str, mode: str, result: bytes) -> ResultKey:
        return ResultKey(tool if tool in self.result_tools else "", mode, result)

    def call_info(self, tool: str, raw: bytes) -> Any:
        key = CallKey(tool, raw)
        hit = self.calls.entries.get(key)
        return hit if hit is not None else self.calls.put(key, len(raw), self._call(tool, raw))

    def outcome(self, tool: str, mode: str, result: bytes | None, error: bytes | None) -> Any:
        """The outcome of a result or (if not None) an error, memoized."""
        if error is not None:
            hit = self.errors.entries.get(error)
            return hit if hit is not None else self.errors.put(error, len(error), self._error(error))
        if result is None:
            return self._nothing
        key = self.result_key(tool, mode, result)
        hit = self.results.entries.get(key)
        return hit if hit is not None else self.results.put(key, len(result), self._result(tool, mode, result))

    def clear(self) -> None:
        """Forget everything (benchmarks start cold)."""
        for memo in (self.calls, self.results, self.errors):
            memo.entries.clear()


# The process-wide memo the engine uses; pure functions of their keys, so sharing is safe.
HASHER = Hasher(call_info, result_outcome, error_outcome, _NOTHING, result_tools=("exec",))
