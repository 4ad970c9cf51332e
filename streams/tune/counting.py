"""Counting one setting: each event decided as the worker decides it, tallied per agent and detector."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator

import msgspec

from loopwarden.detection.decision import EventDecision, decide_event
from loopwarden.schemas.config import FleetConfig
from loopwarden.tune.trace import Prepared


class Counts(msgspec.Struct, kw_only=True):
    """What one setting does, for one detector, one agent or the whole fleet."""

    runs: int = 0  # runs seen (for the fleet and per agent; per detector: runs it fired on)
    warned: int = 0  # runs shown at least one warning (the bucket rule lets it out)
    blocked: int = 0  # runs with at least one call blocked
    aborted: int = 0  # runs aborted by the post-compaction guard
    first_warn_call: float | None = None  # median call number of a run's first warning
    first_block_call: float | None = None  # median call number of a run's first block or abort
    cut_calls: int = 0  # calls refused by blocks
    cut_tokens: int = 0  # usage tokens of the refused calls
    loop_tokens: int = 0  # tokens charged to loops
    loop_cost: float = 0.0


class Setting(msgspec.Struct, kw_only=True):
    knobs: dict[str, int]
    fleet: Counts
    by_detector: dict[str, Counts]
    by_agent: dict[str, Counts]


class Report(msgspec.Struct, kw_only=True):
    events: int
    runs: int
    bad_lines: int
    has_usage: bool
    settings: list[Setting]
    seconds: float


class _Tally:
    """Per (agent, detector): runs per action, first calls, refused calls and loop usage."""

    __slots__ = (
        "warned",
        "blocked",
        "aborted",
        "first_warn",
        "first_block",
        "cut_calls",
        "cut_tokens",
        "loop_tokens",
        "loop_cost",
    )

    def __init__(self) -> None:
        self.warned: set[int] = set()
        self.blocked: set[int] = set()
        self.aborted: set[int] = set()
        self.first_warn: dict[int, int] = {}
        self.first_block: dict[int, int] = {}
        self.cut_calls = self.cut_tokens = self.loop_tokens = 0
        self.loop_cost = 0.0


def decisions(prep: Prepared, fleet: FleetConfig, tick=None) -> Iterator[tuple[int, EventDecision]]:
    """Each event's decision (:func:`~loopwarden.detection.decision.decide_event`, as in replay and
    the worker), with its index in ``prep.events``. Runs no setting can detect anything in are
    skipped unless a fleet-wide extension is on (its incidents may block any run's calls)."""
    states: dict = {}
    resolve, extensions_of = fleet.resolve, fleet.extensions_of
    events, keys, lines = prep.events, prep.keys, prep.lines
    fleet_side = None
    if fleet.fleet_wide():
        from loopwarden.fleet.offline import FleetTrace

        fleet_side = FleetTrace(fleet)
    board = fleet_side.board if fleet_side is not None else None
    for j, i in enumerate(prep.active if fleet_side is None else range(len(events))):
        if tick is not None and not j & 4095:
            tick(i)
        event = events[i]
        key = keys[i]
        agent = event.agent_id
        before = states.get(key)
        d = decide_event(
            before, event, resolve(agent), extensions_of(event), now=event.ts or 0.0, origin=lines[i], board=board
        )
        if d.state is None:
            states.pop(key, None)
        else:
            states[key] = d.state
        if fleet_side is not None:
            fleet_side.after(before, event, d)
        yield i, d


def run_setting(prep: Prepared, fleet: FleetConfig, tick=None) -> dict[tuple[str, str], _Tally]:
    """Count one setting's decisions over the prepared trace per (agent, detector)."""
    tallies: dict[tuple[str, str], _Tally] = {}
    calls, tokens, runs, agents = prep.calls, prep.tokens, prep.runs, prep.run_agents
    for i, d in decisions(prep, fleet, tick):
        charge = d.charge
        if not d.detections and not d.escalations and charge is None:
            continue
        run = runs[i]
        if charge is not None:
            t = tallies.get((agents[run], charge.detector))
            if t is None:
                t = tallies[(agents[run], charge.detector)] = _Tally()
            t.loop_tokens += charge.tokens
            t.loop_cost += charge.cost or 0.0
        for det in (*d.detections, *(v.detection for v in d.escalations)):
            t = tallies.get((agents[run], det.detector))
            if t is None:
                t = tallies[(agents[run], det.detector)] = _Tally()
            action = det.action
            if action == "warn":
                if det.emitted:
                    t.warned.add(run)
                    t.first_warn.setdefault(run, calls[i])
                continue
            if action == "block":
                t.blocked.add(run)
                t.cut_calls += 1
                t.cut_tokens += tokens[i]
                t.first_block.setdefault(run, calls[i])
            else:
                t.aborted.add(run)
                t.first_block.setdefault(run, calls[i])  # on the result of the run's latest call
    return tallies


def _median(values) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def _merge(tallies: Iterable[_Tally], runs: int) -> Counts:
    warned, blocked, aborted = set(), set(), set()
    first_warn: dict[int, int] = {}
    first_block: dict[int, int] = {}
    out = Counts(runs=runs)
    for t in tallies:
        warned |= t.warned
        blocked |= t.blocked
        aborted |= t.aborted
        for run, call in t.first_warn.items():
            first_warn[run] = min(call, first_warn.get(run, call))
        for run, call in t.first_block.items():
            first_block[run] = min(call, first_block.get(run, call))
        out.cut_calls += t.cut_calls
        out.cut_tokens += t.cut_tokens
        out.loop_tokens += t.loop_tokens
        out.loop_cost += t.loop_cost
    out.warned, out.blocked, out.aborted = len(warned), len(blocked), len(aborted)
    out.first_warn_call, out.first_block_call = _median(first_warn.values()), _median(first_block.values())
    out.loop_cost = round(out.loop_cost, 6)
    if not out.runs:
        out.runs = len(warned | blocked | aborted)
    return out


def summarize(prep: Prepared, knobs: dict[str, int], tallies: dict[tuple[str, str], _Tally]) -> Setting:
    runs_per_agent: dict[str, int] = {}
    for agent in prep.run_agents:
        runs_per_agent[agent] = runs_per_agent.get(agent, 0) + 1
    by_detector: dict[str, list[_Tally]] = {}
    by_agent: dict[str, list[_Tally]] = {}
    for (agent, detector), t in tallies.items():
        by_detector.setdefault(detector, []).append(t)
        by_agent.setdefault(agent, []).append(t)
    return Setting(
        knobs=knobs,
        fleet=_merge(tallies.values(), len(prep.run_agents)),
        by_detector={d: _merge(ts, 0) for d, ts in sorted(by_detector.items())},
        by_agent={a: _merge(ts, runs_per_agent[a]) for a, ts in sorted(by_agent.items())},
    )
