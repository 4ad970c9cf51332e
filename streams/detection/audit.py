"""How a runner's own decision compares with the engine's, for a call the runner decided locally.

A ``tool_call`` that carries the runner's decision (``decision``, schemas/WIRE.md,
"Runner decisions") was already answered by the runner with the same rules and
config. :func:`~loopwarden.detection.decision.decide_event` still decides it
(the run's state must stay the run's) and audits it here:

- where the runner was as strict or stricter (``same`` / ``runner_stricter``)
  none of the engine's per-run verdicts is published: no duplicate crosses the
  control topic; where it agrees, enforcement notes the runner's verdict id
  instead of the engine's, so the runner's ack matches;
- verdicts stricter than the runner's (``runner_laxer``) are published: a
  correction (a runner restarted mid-run and lost its history, a drifted config);
- what no runner can see (fleet-incident blocks, cross-run warnings,
  escalation aborts) is always published and left out of the agreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from loopwarden.schemas.events import RunnerDecision
from loopwarden.schemas.verdicts import Detection

Agreement = Literal["same", "runner_laxer", "runner_stricter"]
RANK = {"allow": 0, "warn": 1, "block": 2, "abort": 3}

# What no runner can decide: published whatever the runner said, left out of the agreement.
FLEET_DETECTORS = frozenset({"fleet_incident", "cross_run_repeat", "escalation"})


class Audited(msgspec.Struct, kw_only=True):
    """The audit of one locally decided call."""

    agreement: Agreement
    publish: list[tuple[str, Detection]]  # the engine's verdicts still to publish (a correction), in order
    notes: list[tuple[str, Detection]]  # what enforcement notes as published: the runner's id where it agrees


def agreement(runner: str, worker: str) -> Agreement:
    r, w = RANK.get(runner, 0), RANK.get(worker, 0)
    return "same" if r == w else ("runner_laxer" if r < w else "runner_stricter")


def worker_action(verdicts: Sequence[tuple[str, Detection]]) -> str:
    """The strictest per-run action among ``verdicts`` (fleet detectors left out)."""
    worker = "allow"
    for _, det in verdicts:
        if det.detector not in FLEET_DETECTORS and RANK[det.action] > RANK[worker]:
            worker = det.action
    return worker


def audit(decision: RunnerDecision, verdicts: Sequence[tuple[str, Detection]]) -> Audited:
    """Compare the runner's ``decision`` with the engine's enforced ``verdicts`` (id, detection) for the call."""
    label = agreement(decision.action, worker_action(verdicts))
    runner_rank = RANK.get(decision.action, 0)
    publish: list[tuple[str, Detection]] = []
    notes: list[tuple[str, Detection]] = []
    for vid, det in verdicts:
        if det.detector in FLEET_DETECTORS or RANK[det.action] > runner_rank:
            publish.append((vid, det))
            notes.append((vid, det))
        elif det.action == decision.action and decision.verdict_id:
            notes.append((decision.verdict_id, det))  # the runner's verdict: its ack names this id
    return Audited(agreement=label, publish=publish, notes=notes)
