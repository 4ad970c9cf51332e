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


# -- the batch path with locally decided calls --------------------------------------------

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 10, "criticalThreshold": 12}}}


def _runner_events(n: int) -> list:
    """What a runner deciding locally publishes for ``n`` identical calls and their results."""
    import asyncio

    from loopwarden.runner import LoopClient
    from loopwarden.schemas.events import decode_event

    client = LoopClient(bootstrap="127.0.0.1:1", config=CONFIG)
    events: list = []

    class Outbox:
        def put(self, topic, key, value):
            events.append(decode_event(value))
            return True

    client._outbox = Outbox()

    async def go() -> None:
        run = client.run("a", run_id="r1")
        for _ in range(n):
            d = await run.check("read", {"path": "a.md"})
            await run.tool_result(d, result=d.blocked_result() if not d.proceed else {"text": "same"})

    asyncio.run(go())
    return events


def _batch(events: list):
    import msgspec

    from loopwarden.schemas.events import encode_event, run_key
    from loopwarden.worker.batch import Limits, apply_batch

    class Rec(msgspec.Struct):
        topic: str
        partition: int
        offset: int
        key: bytes | None
        value: bytes | None

    records = [Rec("e", 0, i, run_key(e).encode(), encode_event(e)) for i, e in enumerate(events)]
    return apply_batch(records, lambda *_: None, FleetConfig.from_document(CONFIG), Limits(control_topic="c"))


def test_a_runner_that_agrees_gets_nothing_on_the_control_topic():
    events = _runner_events(14)  # warn on call 11, blocks from call 13, acks
    batch = _batch(events)
    assert [o for o in batch.outgoing if o.topic == "c"] == []  # no allow, no duplicate verdict
    assert batch.counts.runner_decisions == {("other", "same"): 14}


def test_a_laxer_runner_gets_the_workers_verdicts_as_corrections():
    import msgspec

    from loopwarden.schemas.events import ToolCall
    from loopwarden.schemas.verdicts import Verdict

    events = [
        msgspec.structs.replace(e, decision=RunnerDecision(action="allow")) if type(e) is ToolCall else e
        for e in _runner_events(13)
    ]
    batch = _batch(events)
    control = [
        msgspec.json.decode(o.value, type=Verdict)
        for o in batch.outgoing
        if o.topic == "c" and b'"type":"verdict"' in o.value  # not the violation (block 12 ran)
    ]
    assert [(v.action, v.count) for v in control] == [("warn", 10), ("block", 12)]
    assert batch.counts.runner_decisions == {("other", "same"): 11, ("other", "runner_laxer"): 2}


def test_what_no_runner_can_see_is_published_and_not_a_disagreement():
    incident = det("block", detector="fleet_incident")
    out = audit(RunnerDecision(action="allow"), [("t:0:9:0", incident)])
    assert out.publish == [("t:0:9:0", incident)] and out.agreement == "same"
