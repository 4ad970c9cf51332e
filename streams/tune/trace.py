"""Trace preparation: a recorded trace decoded once, with what a sweep can skip."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from msgspec import UNSET

from loopwarden.detection.payloads import HASHER
from loopwarden.detection.tools import normalize_tool_name
from loopwarden.schemas.events import EventDecodeError, RunEnd, ToolCall, ToolResult, decode_event, state_key
from loopwarden.schemas.jsvalues import is_blank


class Prepared(NamedTuple):
    """A trace decoded once: per event its run number, call number in the run and call usage."""

    events: list  # Event
    keys: list[tuple[str, str]]  # state key per event
    runs: list[int]  # run number per event (a run ends at run_end; its key may start a new one)
    calls: list[int]  # tool_calls of the run so far, this one included (1-based call number)
    tokens: list[int]  # usage tokens of a tool_call (0 without)
    costs: list[float]
    run_agents: list[str]  # agent id per run number
    active: list[int]  # indices of the events of runs that any setting could detect something in
    bad_lines: int
    has_usage: bool
    has_cost: bool
    lines: list[int]  # per event, its index among the non-blank lines (replay's event_index)


def trace_files(paths: Iterable[str]) -> list[Path]:
    """Files as given; a directory gives its ``*.jsonl`` files (recursively, sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]
    return out


def read_lines(files: list[Path]) -> Iterator[bytes]:
    for path in files:
        with open(path, "rb") as fh:
            yield from fh


def prepare(lines: Iterable[bytes | str], profile: bool = False) -> Prepared:
    """Decode once; mark the runs no setting can detect anything in, so a sweep skips them.

    Every rule needs a call whose signature the run has seen before (the
    repeat, poll, breaker and ping-pong streaks), a tool error (unknown tool)
    or a compaction retry (the guard); a run with none of them is the same
    under every setting. With ``profile`` (some agent under the openclaw-latest
    profile) an ``exec`` or ``write`` call is enough too: failing commands and
    rewrites of one file count without repeating a signature.
    """
    events, keys, runs, calls, tokens, costs, run_agents, indices = [], [], [], [], [], [], [], []
    seen_sigs: list[set[str]] = []
    live: list[bool] = []
    current: dict[tuple[str, str], list[int]] = {}  # state key -> [run number, calls so far]
    bad = 0
    has_usage = has_cost = False
    index = -1
    for line in lines:
        if is_blank(line):
            continue
        index += 1
        try:
            event = decode_event(line)
        except EventDecodeError:
            bad += 1
            continue
        key = state_key(event)
        run = current.get(key)
        if run is None:
            run = current[key] = [len(run_agents), 0]
            run_agents.append(event.agent_id)
            seen_sigs.append(set())
            live.append(False)
        t = 0
        c = 0.0
        number = run[0]
        if not live[number] and not isinstance(event, RunEnd):
            if isinstance(event, (ToolCall, ToolResult)):
                sig = HASHER.call_info(
                    normalize_tool_name(event.tool_name), b"{}" if event.params is UNSET else bytes(event.params)
                ).sig
                sigs = seen_sigs[number]
                if isinstance(event, ToolCall):
                    live[number] = sig in sigs or (profile and (sig[:5] == "exec:" or sig[:6] == "write:"))
                else:
                    live[number] = event.error is not UNSET and bytes(event.error) != b"null"
                sigs.add(sig)
            else:  # compaction_retry
                live[number] = True
            if live[number]:
                seen_sigs[number] = set()
        if isinstance(event, ToolCall):
            run[1] += 1
            usage = event.usage
            if usage is not None:
                has_usage = True
                t = usage.input_tokens + usage.output_tokens
                if usage.cost is not None:
                    has_cost = True
                    c = usage.cost
        elif isinstance(event, RunEnd):
            del current[key]
        events.append(event)
        indices.append(index)
        keys.append(key)
        runs.append(run[0])
        calls.append(run[1])
        tokens.append(t)
        costs.append(c)
    active = [i for i, run in enumerate(runs) if live[run]]
    return Prepared(events, keys, runs, calls, tokens, costs, run_agents, active, bad, has_usage, has_cost, indices)
