"""Hashing of the ``openclaw-latest`` profile (RULES.md, "The openclaw-latest profile").

What the newest OpenClaw revision hashes differently from the docs revision:
lone surrogates are escaped instead of dropped (every digest); outcome digests
rewrite the random ids of untrusted-content wrappers first; ``write`` results
with ``changed: false``/``true`` get rules of their own; a failing ``exec`` gets
a failure identity that ignores timestamps, durations, attempts and pids. The
rest is the docs revision's rules (:mod:`loopwarden.detection.hashing`), called,
not copied. Memoized on payload bytes like :mod:`loopwarden.detection.payloads`.
"""

from __future__ import annotations

import hashlib
import math
import posixpath
import re

import msgspec

from loopwarden.detection.canonical import canonical_fast, canonical_slow, js_number, js_string_escaped
from loopwarden.detection.hashing import (
    error_text,
    hashed_value,
    is_veto_details,
    result_mode,
    result_parts,
    unknown_tool_name,
)
from loopwarden.detection.payloads import Hasher, load
from loopwarden.detection.tools import is_known_poll
from loopwarden.schemas.jsvalues import JS_WHITESPACE, js_trim

# Outcome kinds a record can carry (stored as these small ints).
KIND_NONE = 0
KIND_VETO = 1  # the loop's own block, recorded as a veto
KIND_EXEC_FAILURE = 2  # a terminal exec failure
KIND_WRITE_MUTATION = 3  # a write that changed its file

_MARKER = b"EXTERNAL_UNTRUSTED_CONTENT"
_WRAPPER = re.compile(
    r'(<<<EXTERNAL_UNTRUSTED_CONTENT id=(\\*)")([a-f0-9]{16})'
    r'(\2">>>(?:(?!<<<(?:END_)?EXTERNAL_UNTRUSTED_CONTENT)[\s\S])*<<<END_EXTERNAL_UNTRUSTED_CONTENT id=\2")'
    r'\3(\2">>>)'
)
_END_TAG = len("<<<END_EXTERNAL_UNTRUSTED_CONTENT id=")
_QUOTE_RUNS = re.compile(r'(\\*)"')
_ZERO_ID = "0" * 16


def _wrapper_id(match: re.Match) -> str:
    backslashes = len(match.group(2))
    if backslashes & (backslashes + 1):  # not 2**k - 1: not a consistent JSON-escaping depth
        return match.group(0)
    body = match.group(4)
    middle = body[backslashes + 4 : len(body) - _END_TAG - backslashes - 1]
    step = backslashes + 1
    for run in _QUOTE_RUNS.finditer(middle):
        if (len(run.group(1)) + 1) % step:  # a quote at another escaping depth than the wrapper's
            return match.group(0)
    return match.group(1) + _ZERO_ID + body + _ZERO_ID + match.group(5)


def normalize_wrapper_ids(text: str) -> str:
    """Both ids of every untrusted-content wrapper become sixteen zeros (outcome digests only)."""
    if "EXTERNAL_UNTRUSTED_CONTENT" not in text:
        return text
    return _WRAPPER.sub(_wrapper_id, text)


def call_digest(value: object) -> str:
    """A call's digest: the docs revision's serialization, lone surrogates escaped instead of dropped."""
    out = canonical_fast(value)  # None for lone surrogates (and other cases both serializers agree on)
    if out is None:
        out = canonical_slow(value, js_string_escaped).encode("utf-8")
    return hashlib.sha256(out).hexdigest()


def outcome_digest(value: object) -> str:
    """An outcome digest: :func:`call_digest` with wrapper ids normalized in every string and key."""
    out = canonical_fast(value)
    if out is None or _MARKER in out:  # msgspec escapes no letter: no marker in the output, none in a string
        out = canonical_slow(value, js_string_escaped, normalize_wrapper_ids).encode("utf-8")
    return hashlib.sha256(out).hexdigest()


_JS_S = "[" + re.escape(JS_WHITESPACE) + "]"
_FLAGS = re.IGNORECASE | re.ASCII  # \d, \b ASCII, as in a JavaScript /u regex
_VOLATILE = (
    re.compile(r"\d{4}-\d{2}-\d{2}[t ]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:z|[+-]\d{2}:\d{2})?", _FLAGS),
    re.compile(r"\d{1,2}:\d{2}:\d{2}(?:\.\d{1,6})?", re.ASCII),
    re.compile(r"\b(?:attempt|retry)\b(?:" + _JS_S + r"|[#:=])*\d+", _FLAGS),
    re.compile(r"\b\d+(?:\.\d+)?" + _JS_S + r"?(?:ns|us|ms|seconds?|minutes?|hours?|s)\b", _FLAGS),
    re.compile(r"\b(?:pid|ppid)\b(?:" + _JS_S + r"|[#:=])*\d+", _FLAGS),
)


def mask_volatile(output: str) -> str:
    """Timestamps, clock times, attempt/retry numbers, durations and pids become ``#``, in that order."""
    for pattern in _VOLATILE:
        output = pattern.sub("#", output)
    return output


def exec_failure_identity(status: str, details: dict, text: str) -> str | None:
    """The failure identity of a terminal ``exec`` failure, or None when the call is not one."""
    if status != "completed" and status != "failed":
        return None
    code = details.get("exitCode")
    if isinstance(code, bool) or not isinstance(code, (int, float)) or code == 0:
        return None
    if isinstance(code, float) and not math.isfinite(code):
        return None
    timed_out = details.get("timedOut") is True
    if timed_out:
        return None
    aggregated = details.get("aggregated")
    output = (js_trim(aggregated) if isinstance(aggregated, str) else "") or text
    if output == "" or output == f"(Command exited with code {js_number(code)})":
        return None
    return outcome_digest({"status": status, "exitCode": code, "timedOut": timed_out, "output": mask_volatile(output)})


class Outcome(msgspec.Struct, frozen=True, gc=False):
    """A result's or error's record fields; neither ``result_hash`` nor ``kind``: nothing is recorded."""

    result_hash: str | None
    unknown: str | None = None
    kind: int = KIND_NONE
    identity: str | None = None  # failureIdentityHash
    no_progress: bool = False


NOTHING = Outcome(None)
VETO = Outcome(None, kind=KIND_VETO)
UNCHANGED_HASH = hashlib.sha256(b'{"status":"unchanged"}').hexdigest()


def result_outcome(tool: str, mode: str, result: object) -> Outcome:
    """The newest revision's outcome rules for a result without error, in its order."""
    if not isinstance(result, dict):
        return Outcome(outcome_digest(result))
    details, text = result_parts(result)
    if is_veto_details(details):
        return VETO
    if tool == "exec":
        value = hashed_value(tool, mode, details, text)
        status = details.get("status")
        identity = exec_failure_identity(status, details, text) if isinstance(status, str) else None
        if identity is not None:
            return Outcome(outcome_digest(value), kind=KIND_EXEC_FAILURE, identity=identity)
        return Outcome(outcome_digest(value))
    if tool == "write":
        changed = details.get("changed")
        if changed is False:
            return Outcome(UNCHANGED_HASH, no_progress=True)
        if changed is True:
            return Outcome(outcome_digest({"details": details, "text": text}), kind=KIND_WRITE_MUTATION)
    return Outcome(outcome_digest(hashed_value(tool, mode, details, text)))


def error_outcome(error: object) -> Outcome:
    text = error_text(error)
    return Outcome("error:" + outcome_digest(text), unknown_tool_name(text), no_progress=True)


class CallInfo(msgspec.Struct, frozen=True, gc=False):
    """What the profile's rules need to know about a call's params."""

    sig: str
    known_poll: bool
    mode: str
    path: str | None  # a write's non-empty ``params.path``


def call_info(tool: str, raw: bytes) -> CallInfo:
    params = load(raw)
    path = params.get("path") if tool == "write" and isinstance(params, dict) else None
    return CallInfo(
        tool + ":" + call_digest(params),
        is_known_poll(tool, params),
        result_mode(tool, params),
        path if isinstance(path, str) and path else None,
    )


def mutation_target(path: str | None, cwd: str | None = None) -> str | None:
    """mutationTargetHash: digest of ``{"path": ...}``, a relative path first resolved against ``cwd``."""
    if path is None:
        return None
    if cwd:
        path = posixpath.normpath(posixpath.join(cwd, path))
    return call_digest({"path": path})


def _result_outcome(tool: str, mode: str, raw: bytes) -> Outcome:
    return result_outcome(tool, mode, load(raw))


def _error_outcome(raw: bytes) -> Outcome:
    return error_outcome(load(raw))


# The profile's memos (bounded like payloads.HASHER); its result rules read the tool for exec and write.
LATEST_HASHER = Hasher(call_info, _result_outcome, _error_outcome, NOTHING, result_tools=("exec", "write"))
