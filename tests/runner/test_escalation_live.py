"""Escalation on a real worker: a run that keeps retrying a blocked call is aborted at its second block.

The runner is the real :class:`~loopwarden.runner.LoopClient`, gating every call:
it answers each block with the veto (as a well-behaved runner does) but then
retries the same call, which OpenClaw's rules block again and again. With
``loopwarden.escalation.afterBlocks: 2`` the worker publishes, on the event of
the second block, an ``abort`` with detector ``escalation``; the client ends
the run. What the worker published equals what ``replay`` computes from the
events the client wrote to the events topic.
"""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest

from loopwarden.runner import LoopClient
from loopwarden.schemas.config import load_config
from tests.runner.adapter_cases import rid
from tests.support.live import assert_matches, collect, decode_verdicts, expected_verdicts

pytestmark = pytest.mark.integration

CONFIG = {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"escalation": {"afterBlocks": 2}}}
MAX_CALLS = 40  # far more than the run needs: a run that is never aborted fails the test


async def _retrying_runner(bootstrap: str, names, run_id: str) -> tuple[list[str], dict | None]:
    """Call ``lookup {"q": "same"}`` until the run is aborted: the action each check answered, and
    the abort verdict the client got."""
    actions: list[str] = []
    async with LoopClient(
        bootstrap=bootstrap, events_topic=names.events, control_topic=names.control, check_timeout=20.0
    ) as client:
        run = client.run("escalator", session_id="s-esc", run_id=run_id)
        for n in range(MAX_CALLS):
            decision = await run.check("lookup", {"q": "same"}, tool_call_id=f"{run_id}-c{n}")
            assert not decision.failed_open, decision
            actions.append(decision.action)
            if decision.proceed:
                await run.tool_result(decision, result={"content": [{"type": "text", "text": "no match"}]})
            else:
                await run.tool_result(decision, result=decision.blocked_result())
            if run.aborted is not None:
                break
        aborted = run.aborted
        await run.end()
    return actions, msgspec.to_builtins(aborted) if aborted is not None else None


def test_second_block_escalates_to_abort_as_replay_says(tansu, names, workers, tmp_path):
    config = tmp_path / "escalation.json"
    config.write_text(json.dumps(CONFIG))
    worker = workers(names, config=config)
    worker.wait_ready()
    run_id = rid("esc")

    actions, aborted = asyncio.run(_retrying_runner(tansu, names, run_id))
    # Call 21 is the first block; its retry (call 22) is blocked again and escalated in the same batch,
    # so the client may answer that check with the block or with the abort that followed it.
    assert "block" not in actions[:20] and actions[20] == "block" and len(actions) == 22, actions
    assert actions[21] in ("block", "abort"), actions
    assert aborted is not None and aborted["detector"] == "escalation", aborted

    # Replay the events exactly as the worker read them (order and offsets from the events topic).
    records = collect(tansu, names.events, until=lambda rs: any(json.loads(r.value)["type"] == "run_end" for r in rs))
    records.sort(key=lambda r: (r.partition, r.offset))
    assert len({r.partition for r in records}) == 1  # one run: one partition, one order
    events = [json.loads(r.value) for r in records]
    positions = [(r.partition, r.offset) for r in records]
    expected = expected_verdicts(events, positions, names.events, load_config(config))
    escalations = {vid: row for vid, row in expected.items() if row["detector"] == "escalation"}
    assert len(escalations) == 1, expected

    def done(rs) -> bool:
        return set(expected) <= {v["verdict_id"] for _, v in decode_verdicts(rs)}

    published = {
        v["verdict_id"]: v
        for _, v in decode_verdicts(collect(tansu, names.control, until=done))
        if v["action"] != "allow"
    }
    assert set(published) == set(expected)
    for vid, row in expected.items():
        assert_matches(published[vid], row)

    ((abort_id, _row),) = escalations.items()
    abort = published[abort_id]
    assert abort["action"] == "abort" and abort["level"] == "critical" and abort["run_id"] == run_id
    assert abort == aborted
    blocks = sorted(
        (vid for vid, v in published.items() if v["action"] == "block"), key=lambda vid: int(vid.split(":")[2])
    )
    assert len(blocks) == 2
    # The abort answers the event of the second block: same record, the next verdict of it.
    assert abort_id.rsplit(":", 1)[0] == blocks[1].rsplit(":", 1)[0]
    assert abort["tool_call_id"] == published[blocks[1]]["tool_call_id"]

    worker.wait_metric('loopwarden_verdict_acks_total{outcome="applied"}', 3, timeout=30)
    m = worker.metrics()
    assert m['loopwarden_verdicts_total{action="abort",detector="escalation",mode="enforce"}'] == 1
    # The client acked both blocks (the veto was published) and the abort (the run ended).
    assert m['loopwarden_verdict_acks_total{outcome="applied"}'] == 3
