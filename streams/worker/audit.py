"""The worker's audit of runners that decide locally: publish only what the runner could not know.

A ``tool_call`` that carries the runner's own decision (``decision``,
schemas/WIRE.md, "Runner decisions") was already answered by the runner,
with the same rules and config. The worker still runs ``step()`` on it (its
state must stay the run's), compares its own per-run decision with the
runner's, and:

- publishes nothing of its own per-run verdicts when the runner was as
  strict or stricter (``same`` / ``runner_stricter``): no duplicate crosses
  the control topic, and no ``allow`` either (such a call does not ask);
- publishes those of its verdicts that are stricter than the runner's
  (``runner_laxer``): a correction, which the runner applies to the run's
  next call (a runner restarted mid-run and lost its history, a drifted
  config);
- always publishes what no runner can see: fleet-incident blocks and
  cross-run warnings (the fleet hooks' records), escalation aborts.

Where it agrees, the worker notes the runner's verdict id instead of its
own for acks and obedience (:mod:`loopwarden.detection.enforcement`), so
the runner's acks match. Agreement is counted per agent
(``loopwarden_runner_decisions_total``), the agent label capped to the
agents of the config (``agents.list`` or a config-topic record), else
``other``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from loopwarden.schemas.config import FleetConfig, normalize_agent_id
from loopwarden.schemas.events import RunnerDecision
from loopwarden.schemas.verdicts import Detection

Agreement = Literal["same", "runner_laxer", "runner_stricter"]
RANK = {"allow": 0, "warn": 1, "block": 2, "abort": 3}


class Audited(msgspec.Struct, kw_only=True):
    """The audit of one locally decided call."""

    agreement: Agreement
    publish: list[tuple[str, Detection]]  # the worker's verdicts still to publish (a correction), in order
    notes: list[tuple[str, Detection]]  # what enforcement notes as published: the runner's id where it agrees


def agreement(runner: str, worker: str) -> Agreement:
    r, w = RANK.get(runner, 0), RANK.get(worker, 0)
    return "same" if r == w else ("runner_laxer" if r < w else "runner_stricter")


def audit(decision: RunnerDecision, verdicts: list[tuple[str, Detection]]) -> Audited:
    """Compare the runner's ``decision`` with the worker's enforced per-run ``verdicts`` (id, detection)."""
    worker = "allow"
    for _, det in verdicts:
        if RANK[det.action] > RANK[worker]:
            worker = det.action
    label = agreement(decision.action, worker)
    runner_rank = RANK.get(decision.action, 0)
    publish = [(vid, det) for vid, det in verdicts if RANK[det.action] > runner_rank]
    notes = []
    for vid, det in verdicts:
        if RANK[det.action] > runner_rank:
            notes.append((vid, det))
        elif det.action == decision.action and decision.verdict_id:
            notes.append((decision.verdict_id, det))  # the runner's verdict: its ack names this id
    return Audited(agreement=label, publish=publish, notes=notes)


def agent_label(fleet: FleetConfig, agent_id: str) -> str:
    """The agent's id when the config names it (bounded by the config), else ``other``."""
    name = normalize_agent_id(agent_id)
    return name if name in fleet.agent_blocks or name in fleet.agent_ext else "other"
