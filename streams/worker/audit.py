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


# What no runner can decide: published whatever the runner said, left out of the agreement.
FLEET_DETECTORS = frozenset({"fleet_incident", "cross_run_repeat", "escalation"})


def _worker_action(verdicts: list[tuple[str, Detection]] | tuple) -> str:
    worker = "allow"
    for _, det in verdicts:
        if det.detector not in FLEET_DETECTORS and RANK[det.action] > RANK[worker]:
            worker = det.action
    return worker


def audit(decision: RunnerDecision, verdicts: list[tuple[str, Detection]]) -> Audited:
    """Compare the runner's ``decision`` with the worker's enforced ``verdicts`` (id, detection) for the call."""
    label = agreement(decision.action, _worker_action(verdicts))
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


def agent_label(fleet: FleetConfig, agent_id: str) -> str:
    """The agent's id when the config names it (bounded by the config), else ``other``."""
    name = normalize_agent_id(agent_id)
    return name if name in fleet.agent_blocks or name in fleet.agent_ext else "other"


def label(
    decision: RunnerDecision, verdicts: list[tuple[str, Detection]] | tuple, fleet: FleetConfig, agent_id: str
) -> tuple[str, Agreement]:
    """The ``loopwarden_runner_decisions_total`` labels of one audited call: (agent, agreement)."""
    return agent_label(fleet, agent_id), agreement(decision.action, _worker_action(verdicts))
