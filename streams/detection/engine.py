"""The one entry point: ``step(state, event, config) -> StepResult``."""

from __future__ import annotations

from typing import NamedTuple

from schemas.config import ResolvedConfig
from schemas.events import Event
from schemas.verdicts import Detection
from streams.detection.state import RunState


class StepResult(NamedTuple):
    state: RunState | None  # None: the run's state can be dropped (run_end)
    detections: list[Detection]  # in order; `emitted` says which are published
    duplicate: bool = False  # a repeated event_id: nothing was applied
    guard_armed: bool = False  # a compaction_retry armed the guard


def step(state: RunState | None, event: Event, config: ResolvedConfig) -> StepResult:
    raise NotImplementedError
