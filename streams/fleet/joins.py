"""The run side: which signals one step of one run sends to the fleet side.

A run *joins* a signature when at least ``minStreak`` records of its window
share the tool and the failure fingerprint (``loopwarden.fleet.fingerprint:
"normalized"``, the default: :mod:`.fingerprint`) or the exact outcome hash
(``"exact"``), arguments ignored (the same failure with varied arguments is
still one failure), or share an unknown-tool name. A record with an
unknown-tool name counts under that name only, so one failing call joins one
signature. Each run joins a signature once: the signatures it joined are kept
in its :class:`RunState` (``joined``), bounded.

The window keeps outcome hashes only, so each tool result's fingerprint is
noted in the run's state beside them (``RunState.prints``: result hash ->
fingerprint, only for hashes in the window), once per distinct outcome.
"""

from __future__ import annotations

import hashlib
from collections import Counter

import msgspec
from msgspec import UNSET

from loopwarden.detection.engine import StepResult, outcome_hash
from loopwarden.detection.state import History, RunState
from loopwarden.detection.tools import normalize_tool_name
from loopwarden.fleet import fingerprint as fp
from loopwarden.schemas.events import Event, RunEnd, ToolResult, key_for, session_key
from loopwarden.schemas.extensions import Extensions
from loopwarden.schemas.fleet import (
    MAX_SAMPLE_CHARS,
    FinishedRun,
    JoinSignal,
    Signal,
    outcome_signature,
    parse_signature,
    print_signature,
    unknown_signature,
)

MAX_JOINED = 16  # signatures remembered per run
MAX_DECODED_BYTES = 65536  # a JSON string outcome up to this size is read as its text, a longer one cut
PRINT_SLACK = 16  # fingerprints of hashes gone from the window kept before a prune
_fingerprint_encoder = msgspec.json.Encoder()
_str_decoder = msgspec.json.Decoder(str)


def _signature(tool: str, result: str, prints: dict[str, str] | None) -> str:
    print_ = prints.get(result) if prints is not None else None
    return print_signature(tool, print_) if print_ is not None else outcome_signature(tool, result)


def streaks(history: History, at_least: int = 1, prints: dict[str, str] | None = None) -> dict[str, int]:
    """Signature -> number of completed records of the window with it (those with ``at_least``).

    With ``prints`` (normalized fingerprints), a record whose outcome has one counts under it, so
    outcomes that differ only in paths, ids or times count together; others by their exact hash."""
    n = len(history)
    if n < at_least:
        return {}
    counts: Counter = Counter()
    if history.unknowns.count(None) == n:  # the usual case: one C-level count over (tool, result)
        pairs = Counter(zip(history.tools, history.results))
        if prints is None:
            return {
                outcome_signature(tool, result): c
                for (tool, result), c in pairs.items()
                if c >= at_least and result is not None
            }
        for (tool, result), c in pairs.items():
            if result is not None:
                counts[_signature(tool, result, prints)] += c
        return {sig: c for sig, c in counts.items() if c >= at_least}
    for tool, result, unknown in zip(history.tools, history.results, history.unknowns):
        if unknown is not None:
            counts[unknown_signature(unknown)] += 1
        elif result is not None:
            counts[_signature(tool, result, prints)] += 1
    return {sig: c for sig, c in counts.items() if c >= at_least}


def outcome_text(event: ToolResult) -> str:
    """The outcome of a tool result as text (the error if any, else the result), for the fingerprint.

    A JSON string is read as its text; anything else is its JSON text. Bounded: at most
    ``fingerprint.MAX_INPUT_CHARS`` characters, the head and the tail of a longer one."""
    raw = event.error if event.error is not UNSET and bytes(event.error) != b"null" else event.result
    if raw is UNSET:
        return ""
    body = bytes(raw)
    if body[:1] == b'"' and len(body) <= MAX_DECODED_BYTES:
        try:
            return fp.bounded(_str_decoder.decode(body))
        except msgspec.DecodeError:
            pass
    if len(body) <= 4 * fp.MAX_INPUT_CHARS:
        return fp.bounded(body.decode("utf-8", "replace"))
    half = 2 * fp.MAX_INPUT_CHARS  # bytes of each end, enough for their characters
    return fp.bounded(body[:half].decode("utf-8", "replace") + " … " + body[-half:].decode("utf-8", "replace"))


def note_print(state: RunState, event: ToolResult, ext: Extensions) -> str | None:
    """Note the fingerprint of the outcome this result recorded in the run's window (``state.prints``).

    Computed once per distinct outcome hash of the run; hashes gone from the window are
    forgotten, so the map is bounded by the window. The fingerprint, or None (nothing recorded)."""
    result_hash = outcome_hash(event, ext)
    results = state.history.results
    if result_hash is None or result_hash not in results:
        return None  # a veto, or an outcome without a hash: nothing was recorded
    prints = state.prints if state.prints is not None else {}
    print_ = prints.get(result_hash)
    if print_ is None:
        print_ = prints[result_hash] = fp.fingerprint(normalize_tool_name(event.tool_name), outcome_text(event))
        if len(prints) > len(results) + PRINT_SLACK:
            live = set(results)
            prints = {h: p for h, p in prints.items() if h in live}
    state.prints = prints
    return print_


def outcome_sample(event: Event) -> str:
    """The outcome text of a tool result, bounded (what operators see in the incident)."""
    if not isinstance(event, ToolResult):
        return ""
    raw = event.error if event.error is not UNSET and bytes(event.error) != b"null" else event.result
    if raw is UNSET:
        return ""
    return bytes(raw)[: 4 * MAX_SAMPLE_CHARS].decode("utf-8", "replace")[:MAX_SAMPLE_CHARS]


def join_signals(
    state: RunState, event: Event, min_streak: int, ts: float, samples: bool = False, normalized: bool = False
) -> list[JoinSignal]:
    """The signatures this run joins at this event (each once per run); records them in ``state``.

    ``samples`` (``incidents.samples``): carry the outcome text, which is raw tool output and
    may hold what the tool read (tokens, personal data); off, the signal has none. The
    normalized example (:func:`.fingerprint.example`) is always carried: paths, ids and
    secrets are out of it. ``normalized``: join by failure fingerprint (``state.prints``)."""
    history = state.history
    if len(history) < min_streak:
        return []
    joined = state.joined or []
    out = []
    prints = state.prints if normalized else None
    for signature, n in streaks(history, min_streak, prints).items():
        if signature in joined:
            continue
        tool, result_hash, unknown, print_ = parse_signature(signature)
        same_tool = normalize_tool_name(getattr(event, "tool_name", None)) == tool
        sample = outcome_sample(event) if samples and same_tool else ""
        example = fp.example(outcome_text(event)) if same_tool and isinstance(event, ToolResult) else ""
        out.append(
            JoinSignal(
                signature=signature,
                run_key=key_for(event.agent_id, event.session_id, event.run_id),
                agent_id=event.agent_id,
                ts=ts,
                tool_name=tool,
                outcome_hash=result_hash,
                unknown_tool=unknown,
                streak=n,
                sample=sample,
                fingerprint=print_ if print_ is not None else result_hash,
                fingerprint_kind=fp.NAME if print_ is not None else (fp.EXACT if result_hash is not None else None),
                example=example,
            )
        )
        joined.append(signature)
    if out:
        del joined[:-MAX_JOINED]
        state.joined = joined
    return out


def fingerprint(history: History, prints: dict[str, str] | None = None) -> tuple[str, int]:
    """(digest of the multiset of (tool, argsHash, resultHash) records, record count); ("", 0) when empty.

    With ``prints`` (normalized fingerprints), an outcome that has one stands for its hash, so runs
    whose outputs differ only in times, ids or paths repeat each other."""
    if not len(history):
        return "", 0
    get = prints.get if prints else None
    results = (r or "" for r in history.results) if get is None else (get(r, r) if r else "" for r in history.results)
    records = sorted(zip(history.tools, history.args, results))
    return hashlib.sha256(_fingerprint_encoder.encode(records)).hexdigest()[:32], len(records)


def run_signals(
    state_in: RunState | None, event: Event, result: StepResult, ext: Extensions, now: float = 0.0
) -> list[Signal]:
    """What one applied step sends to the fleet side (empty with both extensions off).

    ``state_in`` is the state handed to ``step()`` (mutated in place by it; at a
    ``run_end`` it is the run's final state). Time is the event's ``ts``
    (``now`` for an event without one).
    """
    if result.duplicate:
        return []
    ts = event.ts if event.ts is not None else now
    normalized = ext.fleet.fingerprint == "normalized"
    if isinstance(event, RunEnd):
        if not ext.cross_run.enabled or state_in is None:
            return []
        digest, n = fingerprint(state_in.history, state_in.prints if normalized else None)
        return [
            FinishedRun(
                session_key=session_key(event),
                run_key=key_for(event.agent_id, event.session_id, event.run_id),
                agent_id=event.agent_id,
                ts=ts,
                fingerprint=digest,
                records=n,
                session_id=event.session_id,
                run_id=event.run_id,
                origin=event.origin,
            )
        ]
    if isinstance(event, ToolResult) and result.state is not None:
        if normalized and (ext.incidents.enabled or ext.cross_run.enabled):
            note_print(result.state, event, ext)
        if ext.incidents.enabled:
            cfg = ext.incidents
            return list(join_signals(result.state, event, max(1, cfg.min_streak), ts, cfg.samples, normalized))
    return []
