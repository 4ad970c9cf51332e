"""RULES.md L9: the OpenClaw release's batch admission and bounded recovery, in a runner deciding locally.

(Checked against the release itself in tests/detection/test_openclaw_release*.py; these pin each rule.)
"""

from __future__ import annotations

import asyncio

from loopwarden.runner import LoopClient

PROFILE = {"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"profile": "openclaw-latest"}}
DEFAULT = {"tools": {"loopDetection": {"enabled": True}}}
SAME = {"content": [{"type": "text", "text": "same"}]}


def _client(config=PROFILE) -> LoopClient:
    return LoopClient(config=config, decisions="local")  # local decisions need no broker


async def _history(client, run, n, path="a"):
    """``n`` identical calls that ran, one batch each."""
    for i in range(n):
        (d,) = await client.check_batch([run.call("read", {"path": path}, f"h{path}{i}")])
        assert d.proceed
        await client.tool_result(d, result=SAME)


def test_l9_1_siblings_admitted_earlier_count_as_vetoes():
    async def go():
        client = _client()
        run = client.run("a", run_id="r1")
        await _history(client, run, 19)
        # alone, a 20th identical call would see 19 outcomes; its sibling before it adds a veto: 20
        ds = await client.check_batch([run.call("read", {"path": "a"}, f"b{i}") for i in range(2)])
        return ds

    first, second = asyncio.run(go())
    assert (first.action, first.recovery) == ("block", "sibling")
    assert (second.action, second.recovery, second.verdict.count) == ("block", "trigger", 20)


def test_l9_1_admitted_batches_record_their_calls_as_pending_calls():
    async def go():
        client = _client()
        run = client.run("a", run_id="r1")
        ds = await client.check_batch([run.call("read", {"path": "a"}, f"b{i}") for i in range(3)])
        for d in ds:
            await client.tool_result(d, result=SAME)
        await _history(client, run, 17)
        return await client.check_batch([run.call("read", {"path": "a"}, "next")])

    (d,) = asyncio.run(go())  # the batch's three outcomes filled its three records: 20, not 23
    assert (d.action, d.verdict.count, d.verdict.detector) == ("block", 20, "generic_repeat")


def test_l9_2_first_critical_refuses_the_batch_and_vetoes_only_the_triggers_signature():
    async def go():
        client = _client()
        run = client.run("a", run_id="r1")
        await _history(client, run, 20)
        ds = await client.check_batch(
            [run.call("read", {"path": "a"}, "x1"), run.call("read", {"path": "a"}, "x2"), run.call("ls", {}, "x3")]
        )
        for d in ds:
            await client.tool_result(d, result=d.blocked_result())
        # the next identical call counts 20 outcomes and the two vetoes; ls was never recorded
        nxt = await client.check_batch([run.call("ls", {}, "y1"), run.call("read", {"path": "a"}, "y2")])
        return ds, nxt

    ds, nxt = asyncio.run(go())
    assert [(d.action, d.recovery, d.terminal) for d in ds] == [
        ("block", "trigger", False),
        ("block", "sibling", False),
        ("block", "sibling", False),
    ]
    assert ds[0].message.endswith("Do not repeat this exact tool action. Reassess the task. You may answer the "
                                  "user, ask for clarification, or continue with a different tool or different "
                                  "arguments.")  # fmt: skip
    assert ds[0].message.startswith("CRITICAL: Called read with identical outcomes 20 times.")
    assert nxt[1].recovery == "trigger" and nxt[1].verdict.count == 22 and nxt[0].recovery == "sibling"


def test_l9_3_second_critical_aborts_the_run_and_a_new_run_starts_again():
    async def go():
        client = _client()
        run = client.run("a", run_id="r1")
        await _history(client, run, 20)
        first = await client.check_batch([run.call("read", {"path": "a"}, "c1")])
        second = await client.check_batch([run.call("read", {"path": "a"}, "c2"), run.call("ls", {}, "c3")])
        later = await client.check(run.call("ls", {}, "c4"))
        fresh = client.run("a", run_id="r2")
        await _history(client, fresh, 20)
        again = await client.check_batch([fresh.call("read", {"path": "a"}, "d1")])
        return first, second, later, run.aborted, again

    first, second, later, aborted, again = asyncio.run(go())
    assert first[0].action == "block" and not first[0].terminal
    assert [(d.action, d.recovery, d.terminal) for d in second] == [
        ("abort", "trigger", True),
        ("abort", "sibling", True),
    ]
    assert second[0].message.endswith(
        "Critical tool-loop recovery failed because another critical loop was detected. This run is stopping now."
    )
    assert second[1].message == (
        "This tool was not executed because another call in the batch repeated a critical tool loop. "
        "This run is stopping now."
    )
    assert aborted is not None and (later.action, later.source) == ("abort", "aborted")
    assert (again[0].action, again[0].terminal) == ("block", False)


def test_l9_4_warning_note_is_the_releases_and_only_when_emitted():
    async def go():
        client = _client()
        run = client.run("a", run_id="r1")
        await _history(client, run, 10)
        (warned,) = await client.check_batch([run.call("read", {"path": "a"}, "w1")])
        await client.tool_result(warned, result=SAME)
        (quiet,) = await client.check_batch([run.call("read", {"path": "a"}, "w2")])
        return warned, quiet

    warned, quiet = asyncio.run(go())
    assert warned.note == (
        "[System note: Tool-loop warning after 10 repeated calls. "
        "Change your approach or stop if you are not making progress.]"
    )
    assert quiet.action == "allow" and quiet.note is None  # count 11: same bucket, not emitted


def test_without_the_profile_a_batch_is_its_calls_checked_one_by_one():
    async def go():
        client = _client(DEFAULT)
        run = client.run("a", run_id="r1")
        for i in range(20):
            d = await client.check(run.call("read", {"path": "a"}, f"h{i}"))
            await client.tool_result(d, result=SAME)
        return await client.check_batch([run.call("read", {"path": "a"}, f"b{i}") for i in range(3)])

    ds = asyncio.run(go())
    assert [d.action for d in ds] == ["block", "block", "block"]  # each decided alone (R1: not recorded, stays 20)
    assert all(d.recovery is None and not d.release and d.verdict.count == 20 for d in ds)
    assert ds[0].message.startswith("CRITICAL: Called read with identical arguments and identical outcomes 20 times.")
