"""The decision service's trust model, state side (deploy/SECURITY.md, "The decision service"): over
real HTTP on loopback, what a caller that reaches the service can and cannot do to a run's
enforcement.

- no flood of other runs, sessions or pending checks evicts a run that had a warning, block or
  abort before every run that had none (the service's tables and the engine's states);
- runs are keyed by (agent, session, run), as the worker keys them;
- ending or restarting a run does not lift its block: its ids resumed are blocked again, and a
  session whose current run holds a block stays on it;
- the agent under guard, posting to the service with its own run's ids from its own tool calls,
  does not lift its block;
- pending checks are bounded in bytes: a large params is kept as a digest.
"""

from __future__ import annotations

import tracemalloc

import pytest

from loopwarden.sidecar.service import Limits
from tests.runner.test_runner_local import Captured
from tests.sidecar import test_sidecar

http = test_sidecar.http  # the fixture: a service deciding locally, over real HTTP on loopback
A = {"agent_id": "a", "session_id": "s1"}
READ = {"tool_name": "read", "params": {"path": "a"}}


class Counting(Captured):
    """An outbox that keeps only the events' types and run ids (large params would stay in memory)."""

    def put(self, topic: str, key: bytes | None, value: bytes) -> bool:
        import msgspec

        head = msgspec.json.decode(value, type=dict[str, object] | None) if len(value) < 4096 else None
        self.events.append((head or {}).get("type"))
        return True


async def post(client, path: str, body: dict) -> dict:
    r = await client.post(path, json=body)
    assert r.status == 200, await r.text()
    return await r.json()


async def call(client, ids: dict, result: object = "same", call: dict = READ) -> dict:
    """One check and its result, as a hook reports them (a block's result says it was blocked)."""
    a = await post(client, "/v1/check", {**ids, **call})
    body = {**ids, "run_id": a["run_id"], "tool_call_id": a["tool_call_id"], "tool_name": call["tool_name"]}
    await post(client, "/v1/result", {**body, "result": {"text": result}, "blocked": not a["proceed"]})
    return a


async def blocked(client, ids: dict) -> dict:
    """Loop ``ids``'s run to its block (warning 10, critical 12); the block's answer."""
    answers = [await call(client, ids) for _ in range(14)]
    assert [a["action"] for a in answers][-3:] == ["allow", "block", "block"]
    return answers[-1]


async def flood(client, n: int, tag: str = "f") -> None:
    for i in range(n):
        await post(client, "/v1/check", {"agent_id": f"{tag}{i}", "session_id": f"{tag}{i}", **READ})


@pytest.mark.parametrize(
    "named,tables,engine",
    [(True, 20, 20), (False, 20, 20), (True, 10_000, 20), (False, 20, 10_000)],
    ids=["run-named", "session-only", "engine-states-only", "service-tables-only"],
)
async def test_a_flood_of_fresh_runs_does_not_unblock_a_run(http, named, tables, engine):
    """F1: more fresh runs than a table holds (the service's runs and sessions, the engine's states,
    each alone or both) evict the runs that had nothing first; the blocked run's next identical
    call is still blocked."""
    client, svc, out = await http(Limits(max_sessions=tables, max_runs=tables), max_local_runs=engine)
    ids = {**A, "run_id": "R"} if named else A
    await blocked(client, ids)
    await flood(client, 100)
    again = await post(client, "/v1/check", {**ids, **READ})
    assert (again["action"], again["source"]) == ("block", "local")
    stats = (await post_get(client, "/v1/stats"))["service"]
    assert stats["live_runs_evicted"] == 0 and svc.tables().live_runs == 1
    assert stats["runs_evicted"] >= (80 if tables == 20 else 0)
    assert svc.client._local.evicted >= (80 if engine == 20 else 0)


async def test_past_the_live_share_the_oldest_live_run_goes(http):
    """Live runs have half of each table: a flood of runs that each reach a warning, bigger than that
    share, does evict the oldest (the worker's audit restores its block: tests/runner/test_runner_audit.py)."""
    client, svc, out = await http(Limits(max_sessions=8, max_runs=8), max_local_runs=8)
    await blocked(client, {**A, "run_id": "R"})
    for i in range(5):  # 5 more live runs: past the live share (4)
        for _ in range(11):
            await call(client, {"agent_id": f"w{i}", "session_id": f"w{i}", "run_id": f"w{i}"})
    assert svc.tables().live_runs == 4
    stats = (await post_get(client, "/v1/stats"))["service"]
    assert stats["live_runs_evicted"] == 2


async def post_get(client, path: str) -> dict:
    return await (await client.get(path)).json()


async def test_runs_are_keyed_by_agent_session_and_run(http):
    """Keying: run id R of another agent, or of another session, is another run: not blocked by R's loop,
    and its run_end does not reset agent a's R."""
    client, svc, out = await http()
    mine = {**A, "run_id": "R"}
    await blocked(client, mine)
    for other in ({"agent_id": "z", "session_id": "s1"}, {"agent_id": "a", "session_id": "s2"}):
        theirs = await post(client, "/v1/check", {**other, "run_id": "R", **READ})
        assert theirs["action"] == "allow"
    await post(client, "/v1/run_end", {"agent_id": "z", "session_id": "z", "run_id": "R"})
    await post(client, "/v1/run_end", {"agent_id": "z", "session_id": "s1", "run_id": "R"})
    assert (await post(client, "/v1/check", {**mine, **READ}))["action"] == "block"


async def test_ending_or_restarting_a_run_does_not_lift_its_block(http):
    """F2: run_end with the run's ids, or run_start of another run id in its session, ends the run but
    keeps its state: the same run id's next identical call is blocked. The new run starts from zero
    (RULES.md §11.3: OpenClaw scopes detection by run id)."""
    client, svc, out = await http()
    mine = {**A, "run_id": "R"}
    await blocked(client, mine)
    await post(client, "/v1/run_end", mine)
    assert (await post(client, "/v1/check", {**mine, **READ}))["action"] == "block"
    started = await post(client, "/v1/run_start", {**A, "run_id": "R2"})
    assert started["run_id"] == "R2"
    assert (await post(client, "/v1/check", {**mine, **READ}))["action"] == "block"
    assert (await post(client, "/v1/check", {**A, "run_id": "R2", **READ}))["action"] == "allow"
    ends = [e.run_id for e in out.events if type(e).__name__ == "RunEnd"]
    assert ends == ["R"]  # published once: the worker hears the run ended
    assert svc.stats.runs_kept == 1


async def test_a_session_without_run_ids_stays_on_its_blocked_run(http):
    """F2 for hosts that cannot name their runs (requests without run id): while the session's current
    run holds a block, neither run_start (with or without a run id) nor run_end moves the session off
    it, as OpenClaw keeps a session's unscoped calls in one history."""
    client, svc, out = await http()
    first = await blocked(client, A)
    for body in (A, {**A, "run_id": "fresh"}):
        started = await post(client, "/v1/run_start", body)
        assert (await post(client, "/v1/check", {**A, **READ}))["action"] == "block", body
        assert started["run_id"] == (body.get("run_id") or first["run_id"])
    await post(client, "/v1/run_end", A)
    again = await post(client, "/v1/check", {**A, **READ})
    assert (again["action"], again["run_id"]) == ("block", first["run_id"])
    # other calls go on: the run is blocked for its loop only
    assert (await post(client, "/v1/check", {**A, "tool_name": "read", "params": {"path": "b"}}))["action"] == "allow"


async def test_an_abort_outlives_run_end_and_a_new_prompt_starts_clean(http):
    """An aborted run's ids answer abort after its run_end; a run_start opens a new run (the abort
    ended the run, as OpenClaw's does)."""
    client, svc, out = await http()
    await post(client, "/v1/compaction", {**A, "reason": "overflow"})
    for _ in range(3):
        a = await call(client, A)
    run = {**A, "run_id": a["run_id"]}
    assert (await post(client, "/v1/check", {**run, **READ}))["action"] == "abort"
    await post(client, "/v1/run_end", A)
    assert (await post(client, "/v1/check", {**run, **READ}))["action"] == "abort"
    started = await post(client, "/v1/run_start", A)
    assert started["run_id"] != a["run_id"]
    assert (await post(client, "/v1/check", {**A, **READ}))["action"] == "allow"
    acks = [e for e in out.events if type(e).__name__ == "VerdictAck"]
    assert len(acks) == 1  # acked once, however often it is ended


async def test_the_agent_cannot_lift_its_own_block_through_the_service(http):
    """What a coding agent could do from its own shell, with its own run's ids (Claude Code's hook names
    the run by the prompt id): end it, start another, post results for its blocked call and fake
    outcomes of its loop, flood the service. The hook's next identical check is still blocked."""
    client, svc, out = await http(Limits(max_sessions=40, max_runs=40), max_local_runs=40)
    mine = {**A, "run_id": "prompt-1"}
    block = await blocked(client, mine)
    await post(client, "/v1/run_end", mine)
    await post(client, "/v1/run_start", A)
    await post(client, "/v1/run_start", {**A, "run_id": "prompt-2"})
    result = {**mine, "tool_name": "read", "params": READ["params"]}
    await post(client, "/v1/result", {**result, "tool_call_id": block["tool_call_id"], "result": "changed"})
    for i in range(30):  # outcomes that seem to progress, with and without call ids
        await post(client, "/v1/result", {**result, "tool_call_id": f"fake-{i}", "result": f"new {i}"})
        await post(client, "/v1/result", {**result, "result": f"other {i}"})
    await flood(client, 200)
    again = await post(client, "/v1/check", {**mine, **READ})
    assert again["action"] == "block"


async def test_pending_checks_keep_a_digest_of_large_params(http):
    """F3: a check waiting for its result keeps large params only as a digest (a decoded Raw keeps the
    whole request body alive, so small params are copied out of it): 150 checks of 1 MB no longer hold
    150 MB, and results still pair, by
    call id or by tool and params, publishing the params they carry."""
    client, svc, out = await http(outbox=Counting)
    big = {"blob": "x" * ((1 << 20) - 400)}
    ids = {**A, "run_id": "R"}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(100):
            await post(client, "/v1/check", {**ids, "tool_name": "write", "params": {**big, "n": i}})
        for _ in range(50):  # small params in a large body (unknown fields are ignored): copied out of it
            await post(client, "/v1/check", {**ids, **READ, "pad": big["blob"]})
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 16 << 20, held  # was 100 MiB and more
    assert svc.tables().pending == 150 and svc.tables().pending_bytes < 150_000
    paired = await post(client, "/v1/result", {**ids, "tool_name": "write", "params": {"n": 7, **big}, "result": 1})
    assert paired["paired"]  # no call id: paired by tool and params, key order aside
    assert svc.tables().pending == 149


async def test_pending_checks_are_bounded_in_bytes(http):
    """Params under the digest size are kept, within ``max_pending_bytes``: past it the oldest go."""
    client, svc, out = await http(Limits(max_pending_bytes=200_000))
    for i in range(40):
        await post(client, "/v1/check", {**A, "tool_name": "write", "params": {"text": "y" * 15_000, "n": i}})
    tables = svc.tables()
    assert tables.pending_bytes <= 200_000 and tables.pending < 14
    assert svc.stats.pending_evicted == 40 - tables.pending
