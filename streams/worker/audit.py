"""The worker's side of the audit of locally decided calls: the agreement metric's labels.

:func:`~loopwarden.detection.decision.decide_event` audits a call the runner decided
itself (:mod:`loopwarden.detection.audit`: which of the engine's verdicts are
published, whose verdict id enforcement notes). The worker counts the agreement
per agent (``loopwarden_runner_decisions_total``), the agent label capped to the
agents of the config (``agents.list`` or a config-topic record), else ``other``.
"""

from __future__ import annotations

from loopwarden.detection.audit import Agreement, Audited, agreement, audit  # noqa: F401 (the worker's names)
from loopwarden.schemas.config import FleetConfig, normalize_agent_id


def agent_label(fleet: FleetConfig, agent_id: str) -> str:
    """The agent's id when the config names it (bounded by the config), else ``other``."""
    name = normalize_agent_id(agent_id)
    return name if name in fleet.agent_blocks or name in fleet.agent_ext else "other"


def label(fleet: FleetConfig, agent_id: str, agreed: Agreement) -> tuple[str, Agreement]:
    """The ``loopwarden_runner_decisions_total`` labels of one audited call: (agent, agreement)."""
    return agent_label(fleet, agent_id), agreed
