"""The run side: which signals one step of one run sends to the fleet side.

A run *joins* a signature when at least ``minStreak`` records of its window
share the tool and the outcome hash (arguments ignored: the same failure with
varied arguments is still one failure), or share an unknown-tool name. A
record with an unknown-tool name counts under that name only, so one failing
call joins one signature. Each run joins a signature once: the signatures it
joined are kept in its :class:`RunState` (``joined``), bounded.
"""

from __future__ import annotations

import hashlib
from collections import Counter

import msgspec
from msgspec import UNSET

from loopwarden.detection.engine import StepResult
from loopwarden.detection.state import History, RunState
from loopwarden.detection.tools import normalize_tool_name
from loopwarden.schemas.events import Event, RunEnd, ToolResult, key_for, session_key
from loopwarden.schemas.extensions import Extensions
from loopwarden.schemas.fleet import (
    MAX_SAMPLE_CHARS,
    FinishedRun,
    JoinSignal,
    Signal,
    outcome_signature,
    parse_signature,
    unknown_signature,
)

MAX_JOINED = 16  # signatures remembered per run
_fingerprint_encoder = msgspec.json.Encoder()


def streaks(history: History, at_least: int = 1) -> dict[str, int]:
    """Signature -> number of completed records of the window with it (those with ``at_least``)."""
    n = len(history)
    if n < at_least:
        return {}
    if history.unknowns.count(None) == n:  # the usual case: one C-level count over (tool, result)
        return {
            outcome_signature(tool, result): c
            for (tool, result), c in Counter(zip(history.tools, history.results)).items()
            if c >= at_least and result is not None
        }
    counts: Counter = Counter()
    for tool, result, unknown in zip(history.tools, history.results, history.unknowns):
        if unknown is not None:
            counts[(None, unknown)] += 1
        elif result is not None:
            counts[(tool, result)] += 1
    return {
        (unknown_signature(b) if a is None else outcome_signature(a, b)): c
        for (a, b), c in counts.items()
        if c >= at_least
    }


def outcome_sample(event: Event) -> str:
    """The outcome text of a tool result, bounded (what operators see in the incident)."""
    if not isinstance(event, ToolResult):
        return ""
    raw = event.error if event.error is not UNSET and bytes(event.error) != b"null" else event.result
    if raw is UNSET:
        return ""
    return bytes(raw)[: 4 * MAX_SAMPLE_CHARS].decode("utf-8", "replace")[:MAX_SAMPLE_CHARS]


def join_signals(state: RunState, event: Event, min_streak: int, ts: float, samples: bool = False) -> list[JoinSignal]:
    """The signatures this run joins at this event (each once per run); records them in ``state``.

    ``samples`` (``incidents.samples``): carry the outcome text, which is raw tool output and
    may hold what the tool read (tokens, personal data); off, the signal has none."""
    history = state.history
    if len(history) < min_streak:
        return []
    joined = state.joined or []
    out = []
    for signature, n in streaks(history, min_streak).items():
        if signature in joined:
            continue
        tool, outcome_hash, unknown = parse_signature(signature)
        same_tool = normalize_tool_name(getattr(event, "tool_name", None)) == tool
        sample = outcome_sample(event) if samples and same_tool else ""
        out.append(
            JoinSignal(
                signature=signature,
                run_key=key_for(event.agent_id, event.session_id, event.run_id),
                agent_id=event.agent_id,
                ts=ts,
                tool_name=tool,
                outcome_hash=outcome_hash,
                unknown_tool=unknown,
                streak=n,
                sample=sample,
            )
        )
        joined.append(signature)
    if out:
        del joined[:-MAX_JOINED]
        state.joined = joined
    return out


def fingerprint(history: History) -> tuple[str, int]:
    """(digest of the multiset of (tool, argsHash, resultHash) records, record count); ("", 0) when empty."""
    if not len(history):
        return "", 0
    records = sorted(zip(history.tools, history.args, (r or "" for r in history.results)))
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
    if isinstance(event, RunEnd):
        if not ext.cross_run.enabled or state_in is None:
            return []
        digest, n = fingerprint(state_in.history)
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
    if isinstance(event, ToolResult) and ext.incidents.enabled and result.state is not None:
        cfg = ext.incidents
        return list(join_signals(result.state, event, max(1, cfg.min_streak), ts, cfg.samples))
    return []
