"""The settings a sweep runs: the knobs, a grid of them, set in the fleet's config."""

from __future__ import annotations

import itertools

from loopwarden.schemas.config import FleetConfig

# Numeric tools.loopDetection knobs a sweep may vary (nested ones with a dot).
KNOBS = (
    "historySize",
    "warningThreshold",
    "criticalThreshold",
    "unknownToolThreshold",
    "globalCircuitBreakerThreshold",
    "postCompactionGuard.windowSize",
)


def parse_sweep(spec: str) -> tuple[str, list[int]]:
    """``knob=LO:HI[:STEP]`` (inclusive) or ``knob=A,B,C``."""
    name, sep, values = spec.partition("=")
    name = name.strip()
    if not sep or name not in KNOBS:
        raise ValueError(f"--sweep {spec!r}: expected KNOB=LO:HI[:STEP] with KNOB one of {', '.join(KNOBS)}")
    try:
        if ":" in values:
            parts = [int(v) for v in values.split(":")]
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] <= 0):
                raise ValueError
            lo, hi, by = parts[0], parts[1], parts[2] if len(parts) == 3 else 1
            grid = list(range(lo, hi + 1, by))
        else:
            grid = [int(v) for v in values.split(",")]
    except ValueError:
        raise ValueError(f"--sweep {spec!r}: values must be integers LO:HI[:STEP] or A,B,C") from None
    if not grid:
        raise ValueError(f"--sweep {spec!r}: empty range")
    return name, grid


def grid(sweeps: list[tuple[str, list[int]]]) -> list[dict[str, int]]:
    names = [n for n, _ in sweeps]
    return [dict(zip(names, point)) for point in itertools.product(*(v for _, v in sweeps))] or [{}]


def with_knobs(fleet: FleetConfig, knobs: dict[str, int]) -> FleetConfig:
    """The fleet with ``knobs`` set in the global block (agent blocks that set a knob keep theirs)."""
    if not knobs:
        return fleet
    block = dict(fleet.global_block or {})
    for name, value in knobs.items():
        outer, _, inner = name.partition(".")
        if inner:
            nested = block.get(outer)
            block[outer] = {**(nested if isinstance(nested, dict) else {}), inner: value}
        else:
            block[name] = value
    return FleetConfig(block, fleet.agent_blocks, fleet.global_ext, fleet.agent_ext)


def enforcing(fleet: FleetConfig) -> FleetConfig:
    """The fleet with ``loopwarden.shadow`` off everywhere: tune asks what enforcing would do."""

    def unshadowed(block):
        return {k: v for k, v in block.items() if k != "shadow"} if isinstance(block, dict) else block

    agent_ext = {agent: unshadowed(block) for agent, block in fleet.agent_ext.items()}
    return FleetConfig(fleet.global_block, fleet.agent_blocks, unshadowed(fleet.global_ext), agent_ext)
