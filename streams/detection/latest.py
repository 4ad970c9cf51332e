"""The ``openclaw-latest`` profile: OpenClaw's newest detector revision (RULES.md, "The openclaw-latest profile").

Opt-in per agent (``loopwarden: {profile: "openclaw-latest"}``). What differs
from the docs revision of :mod:`loopwarden.detection.detectors`:

- fixed constants: only ``enabled`` (and its "exactly false" gates) is read;
- records carry an outcome kind (the loop's own veto, a terminal exec failure,
  a write that changed its file), a failure identity, a no-progress flag and a
  write's target (:class:`loopwarden.detection.state.RecordExtras`);
- the no-progress streak counts the loop's own vetoes, and for ``exec`` also
  failures that keep failing the same way while the command changes;
- ``argument_churn`` warns when one tool cycles through a few argument
  variants with one no-progress outcome, or rewrites one file again and again;
- the decision order gains ``argument_churn`` between the generic block and
  the generic warning.

The unknown-tool streak, ping-pong and recent count are the docs revision's
functions, called here. Everything reads the history before the current call
is recorded.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from loopwarden.detection import messages
from loopwarden.detection.detectors import Finding, pair_key, ping_pong, unknown_tool_streak
from loopwarden.detection.latest_hashing import (
    KIND_EXEC_FAILURE,
    KIND_NONE,
    KIND_VETO,
    KIND_WRITE_MUTATION,
    NOTHING,
    Outcome,
)
from loopwarden.detection.state import History, RecordExtras, RunState
from loopwarden.schemas.extensions import LATEST_FIXED, PROFILE_LATEST
from loopwarden.schemas.verdicts import LivenessSignal

PROFILE = PROFILE_LATEST
UPSTREAM_REVISION = "openclaw/openclaw@2a6274310d06b554a7074a51866e76fb0f0d99b2"

# Fixed: the revision ignores historySize, the thresholds, detectors.* and postCompactionGuard.windowSize.
HISTORY_SIZE = LATEST_FIXED["historySize"]
WARNING = LATEST_FIXED["warningThreshold"]
CRITICAL = LATEST_FIXED["criticalThreshold"]
UNKNOWN_TOOL = LATEST_FIXED["unknownToolThreshold"]
GLOBAL_BREAKER = LATEST_FIXED["globalCircuitBreakerThreshold"]
GUARD_WINDOW = LATEST_FIXED["postCompactionGuard.windowSize"]
STABLE_VARIANT = 3  # calls an argument variant needs to count for argument churn
ARGUMENT_CHURN: Literal["argument_churn"] = "argument_churn"  # the liveness signal, and the detector's name


def extras(state: RunState) -> RecordExtras:
    """The run's profile columns, made blank for the records already there when the profile
    first sees the run (or sees it again after running without it)."""
    x = state.extras
    n = len(state.history)
    if x is None or len(x.kinds) != n:
        x = state.extras = RecordExtras.blank(n)
    return x


def window(h: History) -> int:
    """The window in force: 30, or more while a batch is projected (:func:`project`)."""
    return h.__dict__.get("projected_window", HISTORY_SIZE)


def project(h: History, siblings: int) -> None:
    """While a batch is admitted the release judges each call on the history plus the siblings before it,
    untrimmed: the window grows by the batch for the projection (a transient, never stored)."""
    h.__dict__["projected_window"] = HISTORY_SIZE + max(0, siblings)


def end_projection(h: History, x: RecordExtras) -> None:
    """Back to the window of 30, the oldest records beyond it dropped (the release trims at each commit)."""
    h.__dict__.pop("projected_window", None)
    excess = len(h.args) - HISTORY_SIZE
    if excess > 0:
        h.trim(HISTORY_SIZE)
        x.drop_oldest(excess)


def _push(h: History, x: RecordExtras, tool: str, sig: str, call_id: str | None, outcome: Outcome, target) -> None:
    h.push(tool, sig, call_id, outcome.result_hash, outcome.unknown, window(h))
    x.append(target, outcome.kind, outcome.identity, outcome.no_progress)
    excess = len(x.kinds) - len(h.args)
    if excess > 0:  # the window slid
        x.drop_oldest(excess)


def record_call(h: History, x: RecordExtras, tool: str, sig: str, call_id: str | None, target: str | None) -> None:
    """A pending record with the write's target."""
    _push(h, x, tool, sig, call_id, NOTHING, target)


def record_outcome(
    h: History, x: RecordExtras, tool: str, sig: str, call_id: str | None, outcome: Outcome, target: str | None
) -> bool:
    """Fill the newest pending record of the call (neither hash nor kind yet), else append one (True).

    The caller's own veto comes through here too, so it may fill a pending record like any outcome.
    """
    args, tools, results, call_ids, kinds = h.args, h.tools, h.results, h.call_ids, x.kinds
    for j in range(len(args) - 1, -1, -1):
        if (
            args[j] == sig
            and results[j] is None
            and kinds[j] == KIND_NONE
            and tools[j] == tool
            and (not call_id or call_ids[j] == call_id)
        ):
            results[j] = outcome.result_hash
            call_ids[j] = None  # complete: its id is never read again (History)
            h.unknowns[j] = outcome.unknown
            kinds[j] = outcome.kind
            x.identities[j] = outcome.identity
            x.no_progress[j] = outcome.no_progress
            size = window(h)
            excess = len(args) - size
            if excess > 0:  # the window in force before the profile was larger
                h.trim(size)
                x.drop_oldest(excess)
            return False
    _push(h, x, tool, sig, None, outcome, target)  # complete: no call id kept
    return True


def repeated_streak(h: History, x: RecordExtras, sig: str) -> tuple[int, str | None]:
    """Identical outcomes of ``sig`` since the last change; a veto adds to the outcome it sits on."""
    args, results, kinds = h.args, h.results, x.kinds
    count, pending, latest = 0, 0, None
    for i in range(len(args) - 1, -1, -1):
        if args[i] != sig:
            continue
        result = results[i]
        if result is None:
            if kinds[i] == KIND_VETO:
                pending += 1
            continue
        if latest is None:
            latest, count, pending = result, pending + 1, 0
        elif result == latest:
            count, pending = count + pending + 1, 0
        else:
            break
    return (count, latest) if latest is not None else (pending, None)


def exec_failure_streak(h: History, x: RecordExtras, sig: str) -> tuple[int, str | None]:
    """Newest exec records failing the same way (same hash or failure identity), commands changing or not.

    Once the walk has passed another command, meeting the current command again ends it:
    that failure belongs to an older tail.
    """
    tools, args, results, kinds, identities = h.tools, h.args, h.results, x.kinds, x.identities
    count = pending = 0
    anchor = anchor_identity = None
    crossed = False
    for i in range(len(args) - 1, -1, -1):
        if tools[i] != "exec":
            break
        result = results[i]
        if result is None:
            if kinds[i] == KIND_VETO:
                pending += 1
            continue
        if kinds[i] != KIND_EXEC_FAILURE:
            break
        if anchor is None:
            anchor, anchor_identity, crossed = result, identities[i], args[i] != sig
            count, pending = pending + 1, 0
            continue
        if args[i] == sig:
            if crossed:
                break
        else:
            crossed = True
        if result != anchor and identities[i] != anchor_identity:
            break
        count, pending = count + pending + 1, 0
    return count, anchor


def no_progress_streak(h: History, x: RecordExtras, tool: str, sig: str) -> tuple[int, str | None]:
    """The larger of the repeated-arguments streak and (``exec`` only) the failure streak; ties to the first."""
    count, latest = repeated_streak(h, x, sig)
    if tool == "exec":
        failures, anchor = exec_failure_streak(h, x, sig)
        if failures > count:
            return failures, anchor
    return count, latest


class Churn(msgspec.Struct, frozen=True, gc=False):
    """An argument-churn streak (a Struct: a NamedTuple field named `count` would shadow tuple.count)."""

    count: int
    variants: int
    write: bool = False  # the write-mutation kind


NO_CHURN = Churn(0, 0)


def no_progress_churn(h: History, x: RecordExtras, tool: str, sig: str) -> Churn:
    """The tool's newest no-progress outcomes, when they are a few stable variants with one outcome."""
    tools, args, results, no_progress = h.tools, h.args, h.results, x.no_progress
    groups: dict[str, list] = {}  # argsHash -> [resultHash, records]
    total = 0
    for i in range(len(args) - 1, -1, -1):
        if tools[i] != tool:
            break
        result = results[i]
        if result is None:
            continue  # pending calls and vetoes do not break it
        if not no_progress[i]:
            break
        group = groups.get(args[i])
        if group is None:
            groups[args[i]] = [result, 1]
        elif group[0] != result:
            break
        else:
            group[1] += 1
        total += 1
    if (
        len(groups) >= 2
        and sig in groups
        and all(g[1] >= STABLE_VARIANT for g in groups.values())
        and len({g[0] for g in groups.values()}) == 1
    ):
        return Churn(total, len(groups))
    return NO_CHURN


def write_churn(h: History, x: RecordExtras, sig: str, target: str | None) -> Churn:
    """Distinct rewrites of one file with nothing in between; a repeat of the current call's arguments ends it."""
    if target is None:
        return NO_CHURN
    tools, args, kinds, targets = h.tools, h.args, x.kinds, x.targets
    variants: list[str] = []
    for i in range(len(args) - 1, -1, -1):
        if tools[i] != "write" or kinds[i] != KIND_WRITE_MUTATION or targets[i] != target:
            break
        s = args[i]
        if s in variants:
            del variants[variants.index(s) + 1 :]
            break
        variants.append(s)
    if not variants or sig in variants:
        return NO_CHURN
    return Churn(len(variants), len(variants), True)


def churn(h: History, x: RecordExtras, tool: str, sig: str, target: str | None) -> Churn:
    found = no_progress_churn(h, x, tool, sig)
    return found if found.count else write_churn(h, x, sig, target)


def _churn_finding(tool: str, found: Churn, target: str | None) -> Finding:
    if found.write:
        key = f"argument-churn:{tool}:write-mutation:{target}"
        message = messages.write_churn(tool, found.variants)
    else:
        key = f"argument-churn:{tool}"
        message = messages.argument_churn(tool, found.variants, found.count)
    return Finding("warning", ARGUMENT_CHURN, found.count, key, message, liveness_signal=ARGUMENT_CHURN)


def decide(
    h: History, x: RecordExtras, tool: str, sig: str, known_poll: bool, target: str | None, quick: bool = True
) -> Finding | None:
    """The newest revision's decision table: the first matching row, or None.

    ``quick`` (always, but in the test that checks it changes nothing): skip the walks when
    no row can match.
    """
    args = h.args
    n = len(args)
    recent = h.count(sig) if n >= WARNING else 0
    # Below WARNING records of this signature, and without an alternation ending in it, only
    # walks that start at the newest record can count: the unknown-tool streak (an unknown
    # name there), exec failures, write churn (a write target) and no-progress churn (some
    # no-progress record); each needs the newest record to be this tool's.
    if (
        quick
        and recent < WARNING
        and not (n >= 2 and args[-2] == sig and args[-1] != sig)
        and (
            not (n and h.tools[-1] == tool)
            or (not h.unknowns[-1] and tool != "exec" and target is None and True not in x.no_progress)
        )
    ):
        return None
    unknown_count, unknown_name = unknown_tool_streak(h, tool)
    if unknown_count >= UNKNOWN_TOOL:
        return Finding(
            "critical",
            "unknown_tool_repeat",
            unknown_count,
            f"unknown-tool:{tool}:{unknown_name or 'unknown'}",
            messages.unknown_tool(unknown_name or tool, unknown_count),
        )
    streak, latest = no_progress_streak(h, x, tool, sig)
    tail = latest or "none"
    if streak >= GLOBAL_BREAKER:
        return Finding(
            "critical", "global_circuit_breaker", streak, f"global:{tool}:{sig}:{tail}",
            messages.global_breaker_latest(tool, streak),
        )  # fmt: skip
    found: Churn | None = None
    if known_poll:
        if streak >= CRITICAL:
            return Finding(
                "critical", "known_poll_no_progress", streak, f"poll:{tool}:{sig}:{tail}",
                messages.poll_critical(tool, streak),
            )  # fmt: skip
        if streak >= WARNING:
            found = churn(h, x, tool, sig, target)
            return Finding(
                "warning", "known_poll_no_progress", streak, f"poll:{tool}:{sig}:{tail}",
                messages.poll_warning(tool, streak), liveness_signal=_liveness(found),
            )  # fmt: skip
    pp = ping_pong(h, sig)
    if pp.count >= WARNING:
        key = pair_key(sig, pp.paired_sig) if pp.paired_sig else f"pingpong:{tool}:{sig}"
        if pp.count >= CRITICAL and pp.evidence:
            return Finding(
                "critical", "ping_pong", pp.count, key, messages.ping_pong_critical(pp.count), pp.paired_tool
            )
        found = churn(h, x, tool, sig, target)
        return Finding(
            "warning", "ping_pong", pp.count, key, messages.ping_pong_warning(pp.count), pp.paired_tool,
            _liveness(found),
        )  # fmt: skip
    if not known_poll and streak >= CRITICAL:
        return Finding(
            "critical", "generic_repeat", streak, f"generic:{tool}:{sig}:{tail}",
            messages.generic_critical_latest(tool, streak),
        )  # fmt: skip
    found = churn(h, x, tool, sig, target)
    if found.count >= WARNING:
        return _churn_finding(tool, found, target)
    if not known_poll and recent >= WARNING:
        return Finding(
            "warning", "generic_repeat", recent, f"generic:{tool}:{sig}", messages.generic_warning(tool, recent)
        )
    return None


def _liveness(found: Churn) -> LivenessSignal | None:
    return ARGUMENT_CHURN if found.count >= WARNING else None
