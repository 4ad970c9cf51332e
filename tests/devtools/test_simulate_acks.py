"""``loopwarden simulate --ack-share``: which control records a simulated runner acknowledges, and how."""

from __future__ import annotations

import argparse

from loopwarden.devtools.simulate import ack_for, register


def _verdict(i: int, action: str = "block", type_: str = "verdict") -> dict:
    return {
        "type": type_,
        "verdict_id": f"agent.events:0:{i}:0",
        "action": action,
        "agent_id": "a",
        "session_id": "s",
        "run_id": f"r{i}",
    }


def test_acks_a_stable_share_of_warn_block_abort_verdicts_and_fails_some():
    verdicts = [_verdict(i, ("warn", "block", "abort")[i % 3]) for i in range(3000)]
    acks = [ack_for(v, 0.6, 0.25) for v in verdicts]
    sent = [a for a in acks if a is not None]
    assert 0.55 < len(sent) / len(verdicts) < 0.65
    failed = [a for a in sent if a.outcome == "failed"]
    assert 0.2 < len(failed) / len(sent) < 0.3 and all(a.detail for a in failed)
    # A rerun of the same fleet acks the same verdicts, even where their ids (offsets) moved.
    moved = [{**v, "verdict_id": v["verdict_id"].replace(":0:", ":3:", 1)} for v in verdicts]
    again = [ack_for(v, 0.6, 0.25) for v in moved]
    assert [a.outcome if a else None for a in again] == [a.outcome if a else None for a in acks]
    for verdict, ack in zip(verdicts, acks):
        if ack is not None:
            assert (ack.verdict_id, ack.agent_id, ack.session_id, ack.run_id) == (
                verdict["verdict_id"],
                "a",
                "s",
                verdict["run_id"],
            )


def test_allow_verdicts_and_violation_records_get_no_ack():
    assert ack_for(_verdict(1, "allow"), 1.0, 0.0) is None
    assert ack_for(_verdict(1, "block", "verdict_violation"), 1.0, 0.0) is None
    assert ack_for(_verdict(1, "block"), 0.0, 0.0) is None
    assert ack_for(_verdict(1, "block"), 1.0, 0.0).outcome == "applied"


def test_default_simulator_sends_no_acks():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert parser.parse_args(["simulate"]).ack_share == 0.0
