"""The worker's audit of locally decided calls: what it publishes, what it notes, how it counts."""

from __future__ import annotations

import pytest

from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import RunnerDecision
from loopwarden.schemas.verdicts import Detection
from loopwarden.worker.audit import agent_label, agreement, audit


def det(action: str, detector: str = "generic_repeat", count: int = 12) -> Detection:
    level = "warning" if action == "warn" else "critical"
    return Detection(
        level=level,
        detector=detector,
        count=count,
        warning_key="k",
        tool_name="read",
        message="M",
        action=action,
        emitted=True,
    )


@pytest.mark.parametrize(
    "runner,worker,label",
    [("allow", "allow", "same"), ("allow", "block", "runner_laxer"), ("block", "warn", "runner_stricter")],
)
def test_agreement(runner, worker, label):
    assert agreement(runner, worker) == label


def test_agreeing_runner_gets_nothing_and_its_verdict_id_is_noted():
    block = det("block")
    out = audit(RunnerDecision(action="block", verdict_id="runner:x:3"), [("t:0:9:0", block)])
    assert out.agreement == "same" and out.publish == []
    assert out.notes == [("runner:x:3", block)]  # the runner's ack names its own id


def test_a_laxer_runner_gets_the_workers_stricter_verdicts():
    block = det("block")
    out = audit(RunnerDecision(action="allow"), [("t:0:9:0", block)])
    assert out.agreement == "runner_laxer" and out.publish == [("t:0:9:0", block)] and out.notes == out.publish
    warn = det("warn", count=10)
    out = audit(RunnerDecision(action="warn", verdict_id="runner:x:1"), [("t:0:9:0", warn)])
    assert out.agreement == "same" and out.publish == []


def test_a_stricter_runner_is_not_contradicted():
    out = audit(RunnerDecision(action="block", verdict_id="runner:x:3"), [])
    assert out.agreement == "runner_stricter" and out.publish == [] and out.notes == []


def test_agent_labels_are_bounded_by_the_config():
    fleet = FleetConfig.from_document({"agents": {"list": [{"id": "Billing", "tools": {"loopDetection": {}}}]}})
    assert agent_label(fleet, "billing") == "billing" and agent_label(fleet, " BILLING ") == "billing"
    assert agent_label(fleet, "random-1234") == "other"
