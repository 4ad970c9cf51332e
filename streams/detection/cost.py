"""What loops cost (a loopwarden extension): the ``usage`` of a loop's calls, each charged once.

A detection is charged the calls its streak counts, from the streak's first
call to the verdict's own call. A charged record is zeroed, so a loop that is
detected again is charged only its new calls. A call to a signature blocked
earlier in the run is charged to that block's loop even when nothing fires on
it: the model still paid for it. All of this is kept only for runs whose calls
carry ``usage`` (:class:`RunUsage`); other runs pay one ``is None`` test per event.
"""

from __future__ import annotations

from typing import NamedTuple

from loopwarden.detection.state import MAX_WARNING_KEYS, History, RunState, RunUsage
from loopwarden.schemas.events import Usage
from loopwarden.schemas.verdicts import Detection

_KEYED_BY_WARNING = ("ping_pong", "unknown_tool_repeat")  # their calls differ, their key does not


class Charge(NamedTuple):
    """What one event added to the cost of loops (the worker's metric increments)."""

    detector: str
    tool_name: str
    tokens: int
    cost: float | None  # None: no call of this run carried a cost
    shadow: bool


def start(state: RunState) -> RunUsage:
    """Begin keeping usage for a run: the records so far cost nothing known."""
    usage = state.usage = RunUsage(tokens=[0] * len(state.history))
    return usage


def of_call(u: RunUsage, usage: Usage | None) -> tuple[int, float]:
    """(tokens, cost) of one call; opens the cost column at the first call with a cost."""
    if usage is None:
        return 0, 0.0
    if usage.cost is not None and u.costs is None:
        u.costs = [0.0] * len(u.tokens)
    return usage.input_tokens + usage.output_tokens, usage.cost or 0.0


def align(u: RunUsage, h: History, appended: bool, tokens: int = 0, cost: float = 0.0) -> None:
    """Keep the usage columns beside the history after it appended (or not) and trimmed from the front."""
    costs = u.costs
    if appended:
        u.tokens.append(tokens)
        if costs is not None:
            costs.append(cost)
    excess = len(u.tokens) - len(h)
    if excess > 0:
        del u.tokens[:excess]
        if costs is not None:
            del costs[:excess]


def _members(h: History, det: Detection, sig: str, result_hash: str | None) -> list[int]:
    """Indices of the records the detection's count counted (newest first)."""
    n, count, detector = len(h.args), det.count, det.detector
    if detector == "ping_pong":  # the alternating tail; its count includes the current call
        return list(range(n - 1, max(n - count, -1), -1))
    if detector == "unknown_tool_repeat":  # the newest records
        return list(range(n - 1, max(n - count - 1, -1), -1))
    args, results = h.args, h.results
    if detector == "compaction_loop_persisted":
        hit = lambda i: args[i] == sig and results[i] == result_hash  # noqa: E731
    elif detector == "generic_repeat" and det.level == "warning":  # every record of the signature
        hit = lambda i: args[i] == sig  # noqa: E731
    elif detector == "argument_churn":  # the tool's newest outcomes, whatever their arguments
        tools, tool = h.tools, det.tool_name
        hit = lambda i: tools[i] == tool and bool(results[i])  # noqa: E731
    else:  # a no-progress streak: the newest outcomes of the signature, all equal
        hit = lambda i: args[i] == sig and bool(results[i])  # noqa: E731
    out: list[int] = []
    for i in range(n - 1, -1, -1):
        if hit(i):
            out.append(i)
            if len(out) == count:
                break
    return out


def _bounded_set(book: dict, key: str, value) -> None:
    book[key] = value
    if len(book) > MAX_WARNING_KEYS:
        del book[next(iter(book))]


def _add(u: RunUsage, key: str, tokens: int, cost: float) -> list:
    total = u.loops.get(key)
    if total is None:
        total = [0, 0.0]
        _bounded_set(u.loops, key, total)
    total[0] += tokens
    total[1] += cost
    return total


def charge(
    u: RunUsage,
    h: History,
    det: Detection,
    sig: str,
    tokens: int = 0,
    cost: float = 0.0,
    result_hash: str | None = None,
) -> Charge:
    """Charge a detection its streak's uncharged records plus ``tokens``/``cost`` of its own call.

    Sets the detection's ``loop_tokens``/``loop_cost`` to its loop's total so far.
    """
    col, costs = u.tokens, u.costs
    for i in _members(h, det, sig, result_hash):
        tokens += col[i]
        col[i] = 0
        if costs is not None:
            cost += costs[i]
            costs[i] = 0.0
    key = det.warning_key if det.detector in _KEYED_BY_WARNING else sig
    total = _add(u, key, tokens, cost)
    det.loop_tokens = total[0]
    det.loop_cost = total[1] if costs is not None else None
    if det.action == "block":
        _bounded_set(u.blocked, sig, (det.detector, key, det.shadow))
    return Charge(det.detector, det.tool_name, tokens, cost if costs is not None else None, det.shadow)


def charge_blocked(u: RunUsage, sig: str, tool: str, tokens: int, cost: float) -> Charge | None:
    """A call nothing fired on, to a signature blocked earlier in the run: charged to that loop."""
    entry = u.blocked.get(sig)
    if entry is None:
        return None
    detector, key, shadow = entry
    _add(u, key, tokens, cost)
    return Charge(detector, tool, tokens, cost if u.costs is not None else None, shadow)
