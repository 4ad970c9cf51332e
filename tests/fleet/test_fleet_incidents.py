"""Fleet incidents across workers: the signature's partition may belong to another worker than its runs.

Runs are keyed by run key; their join signals are re-keyed by signature. The
tests pick run ids that land on one worker and a failure whose signature
lands on the other, and check that the incident opens exactly once, on the
other worker, and survives a SIGKILL of the worker that holds it.
"""

from __future__ import annotations

import json
import time

import pytest
from aiokafka.partitioner import murmur2

from loopwarden.detection import step
from loopwarden.fleet.joins import run_signals
from loopwarden.replay import replay_lines
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import decode_event
from tests.support.live import assert_matches, collect, decode_verdicts, produce_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 4
# As many fleet partitions as event partitions, so Faust assigns partition p of both to one worker
# and the tests can place runs on one worker and the signature on the other.
FLEET_PARTITIONS = ["--fleet-partitions", str(PARTITIONS)]
DOC = {
    "loopwarden": {
        "incidents": {"enabled": True, "minStreak": 3, "minRuns": 5, "minAgents": 2, "window": 600, "samples": True}
    }
}


def partition_of(key: str) -> int:
    return (murmur2(key.encode()) & 0x7FFFFFFF) % PARTITIONS


def failing_run(run: str, agent: str, error: str, calls: int = 3) -> list[dict]:
    out = []
    for i in range(calls):
        base = {
            "agent_id": agent,
            "session_id": f"s-{run}",
            "run_id": run,
            "tool_name": "web_search",
            "tool_call_id": f"{run}-{i}",
            "params": {"query": f"{run} attempt {i}"},
        }
        out += [{"type": "tool_call", **base}, {"type": "tool_result", **base, "error": error}]
    return out


def signature_of(error: str) -> str:
    """The signature a run with this failure joins (the same pure code the workers run)."""
    fleet = FleetConfig.from_document(DOC)
    state = None
    for e in failing_run("probe", "probe", error):
        event = decode_event(json.dumps({**e, "ts": 1.0}))
        result = step(state, event, fleet.resolve("probe"))
        state = result.state
        signals = run_signals(state, event, result, fleet.extensions("probe"))
        if signals:
            return signals[0].signature
    raise AssertionError("no join")


def settled(first, second, timeout: float = 90.0) -> tuple[set[int], set[int]]:
    """Both workers ready and the partitions split between them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        a, b = set(first.wait_ready()["partitions"]), set(second.wait_ready()["partitions"])
        if a and b and not a & b and a | b == set(range(PARTITIONS)):
            return a, b
        time.sleep(0.5)
    raise AssertionError(f"partitions never split: {a} {b}")


def pick(runs_on: set[int], signature_on: set[int], n_runs: int) -> tuple[list[str], str]:
    runs = [f"run-{i}" for i in range(200) if partition_of(f"run-{i}") in runs_on][:n_runs]
    error = next(
        f"503 search backend unreachable (edge {k})"
        for k in range(200)
        if partition_of(signature_of(f"503 search backend unreachable (edge {k})")) in signature_on
    )
    return runs, error


def incident_records(tansu: str, topic: str, until, timeout: float = 60.0) -> list[dict]:
    records = collect(
        tansu, topic, until=lambda rs: until([json.loads(r.value) for r in rs]), idle=2.0, timeout=timeout
    )
    return [json.loads(r.value) for r in records]


def opened(records: list[dict]) -> set[str]:
    return {r["incident_id"] for r in records if r["state"] == "open"}


def test_incident_opens_once_on_the_worker_owning_the_signature(tansu, names, workers, tmp_path):
    config = tmp_path / "fleet.json"
    config.write_text(json.dumps(DOC))
    first, second = (
        workers(names, "one", config=config, extra=FLEET_PARTITIONS),
        workers(names, "two", config=config, extra=FLEET_PARTITIONS),
    )
    a, b = settled(first, second)
    runs, error = pick(a, b, 6)
    events = [e for i, run in enumerate(runs) for e in failing_run(run, f"agent-{i % 3}", error)]
    produce_events(tansu, names.events, events)

    records = incident_records(tansu, names.incidents, lambda rs: sum(r["state"] == "update" for r in rs) >= 1)
    assert len(opened(records)) == 1, records
    assert [r["state"] for r in records] == ["open", "update"]
    assert records[-1]["run_count"] == 6 and records[-1]["agent_count"] == 3
    assert sorted(records[-1]["run_keys"]) == sorted(runs)
    assert "503 search backend unreachable" in records[0]["sample"]
    # the runs were all on the first worker, the incident was made by the second
    assert first.metrics().get('loopwarden_fleet_signals_total{kind="join"}') == 6
    assert second.metrics().get("loopwarden_events_total", 0.0) == 0
    assert second.metrics().get('loopwarden_incidents_total{state="open"}') == 1
    assert first.metrics().get('loopwarden_incidents_total{state="open"}', 0.0) == 0
    second.wait_metric("loopwarden_open_incidents", 1)


def test_sigkill_during_an_open_incident_opens_no_duplicate(tansu, names, workers, tmp_path):
    config = tmp_path / "fleet.json"
    config.write_text(json.dumps(DOC))
    first, second = (
        workers(names, "one", config=config, extra=FLEET_PARTITIONS),
        workers(names, "two", config=config, extra=FLEET_PARTITIONS),
    )
    a, b = settled(first, second)
    runs, error = pick(a, b, 8)
    agents = [f"agent-{i % 3}" for i in range(len(runs))]
    produce_events(
        tansu, names.events, [e for run, agent in zip(runs[:5], agents) for e in failing_run(run, agent, error)]
    )
    incident_records(tansu, names.incidents, lambda rs: len(opened(rs)) == 1)

    # SIGKILL the worker holding the incident right after it opened (its offsets may not be committed),
    # and lose its disk too: the survivor takes the partition over from the changelog.
    second.kill()
    second.wipe()
    produce_events(
        tansu, names.events, [e for run, agent in zip(runs[5:], agents[5:]) for e in failing_run(run, agent, error)]
    )
    records = incident_records(tansu, names.incidents, lambda rs: any(r["run_count"] == 8 for r in rs), timeout=90)
    assert len(opened(records)) == 1, records
    assert len({r["incident_id"] for r in records}) == 1
    assert {r["state"] for r in records} == {"open", "update"}
    assert max(r["run_count"] for r in records) == 8
    # the runs of the incident are counted once each, whatever was replayed
    assert sorted(next(r for r in records if r["run_count"] == 8)["run_keys"]) == sorted(runs)


def test_cross_run_repeat_warns_across_partitions(tansu, names, workers, tmp_path):
    config = tmp_path / "fleet.json"
    config.write_text(json.dumps({"loopwarden": {"crossRun": {"enabled": True, "runs": 3}}}))
    worker = workers(names, "solo", config=config)
    worker.wait_ready()
    session = "agent:hb:cron"
    runs = [f"beat-{i}" for i in range(4)]
    assert len({partition_of(r) for r in runs}) > 1  # the session's runs sit on several partitions
    events = []
    for run in runs:
        base = {
            "agent_id": "hb",
            "session_id": session,
            "run_id": run,
            "tool_name": "read",
            "tool_call_id": f"{run}-0",
            "params": {"path": "HEARTBEAT.md"},
        }
        events += [
            {"type": "tool_call", **base},
            {"type": "tool_result", **base, "result": "nothing to do"},
            {"type": "run_end", "agent_id": "hb", "session_id": session, "run_id": run},
        ]
    produce_events(tansu, names.events, events)
    records = collect(tansu, names.control, until=lambda rs: len(rs) >= 2, timeout=60)
    warned = sorted(
        (json.loads(r.value)["run_id"], r.key.decode())
        for r in records
        if json.loads(r.value).get("detector") == "cross_run_repeat"
    )
    assert warned == [("beat-2", "beat-2"), ("beat-3", "beat-3")]


BLOCK_DOC = {
    "loopwarden": {"incidents": {"enabled": True, "block": True, "blockAfter": 3, "minRuns": 5, "minAgents": 2}}
}


def stamped(events: list[dict]) -> list[dict]:
    return [{**e, "ts": time.time()} for e in events]


def test_fleet_response_blocks_a_new_run_as_replay_predicts(tansu, names, workers, tmp_path):
    """While an incident is open, a new run's call after ``blockAfter`` matching outcomes is blocked.

    Each worker's board is fed from the incidents topic, asynchronously; replay puts a record on the
    board at once. The new run's own join publishes an ``update`` (its run count goes into the
    block's message), so the test sends the blocked call once that update is on the topic; sent
    at once, the worker could still name the open record's counts (5 runs instead of 6): the same
    incident id and the same block, but a different message than replay's.
    """
    config = tmp_path / "fleet.json"
    config.write_text(json.dumps(BLOCK_DOC))
    worker = workers(names, "solo", config=config)
    worker.wait_ready()
    error = "503 search backend unreachable"
    first = stamped([e for i in range(5) for e in failing_run(f"run-{i}", f"agent-{i % 3}", error)])
    positions = produce_events(tansu, names.events, first, ts=False)
    records = incident_records(tansu, names.incidents, lambda rs: len(opened(rs)) == 1)
    (incident,) = opened(records)

    new_run = failing_run("run-new", "agent-9", error, calls=4)
    head = stamped(new_run[:6])  # three failed calls: the run joins, the incident is updated
    positions += produce_events(tansu, names.events, head, ts=False)
    incident_records(tansu, names.incidents, lambda rs: any(r["run_count"] == 6 for r in rs))
    time.sleep(3.0)  # the worker's board reads the update from the same topic (a fetch wait of 200 ms)
    call = stamped(new_run[6:7])  # the fourth call
    positions += produce_events(tansu, names.events, call, ts=False)

    verdicts = [
        v
        for _k, v in decode_verdicts(
            collect(
                tansu,
                names.control,
                until=lambda rs: any(json.loads(r.value).get("detector") == "fleet_incident" for r in rs),
                timeout=60,
            )
        )
    ]
    blocks = [v for v in verdicts if v.get("detector") == "fleet_incident"]
    assert len(blocks) == 1, verdicts
    block = blocks[0]
    assert block["action"] == "block" and block["run_id"] == "run-new" and incident in block["message"], block

    trace = first + head + call
    rows = [
        r
        for r in replay_lines([json.dumps(e) for e in trace], FleetConfig.from_document(BLOCK_DOC), incidents=True)
        if isinstance(r, dict) and "type" not in r and r["emitted"]
    ]
    assert [r["detector"] for r in rows] == ["fleet_incident"], rows
    assert_matches(block, rows[0])
    partition, offset = positions[rows[0]["event_index"]]
    assert block["verdict_id"] == f"{names.events}:{partition}:{offset}:0"
    replayed = [
        r
        for r in replay_lines([json.dumps(e) for e in trace], FleetConfig.from_document(BLOCK_DOC), incidents=True)
        if isinstance(r, dict) and r.get("type") == "incident"
    ]
    assert [r["incident_id"] for r in replayed if r["state"] == "open"] == [incident]


# -- the failure fingerprint: agents in their own workspaces, real tool output, real runner clients --

WORKSPACE_DOC = {"loopwarden": {"incidents": {"enabled": True, "minStreak": 3, "minRuns": 5, "minAgents": 2}}}


def agent_workspace(root, i: int):
    """Agent ``i``'s own workspace: another place, depth and name on every agent, as in a fleet."""
    places = [root / "home" / f"user{i}" / "shop", root / "srv" / "agents" / f"agent-{i}" / "ws", root / f"w{i}"]
    ws = places[i % len(places)]
    (ws / "data").mkdir(parents=True)
    return ws


async def _loop_on_missing_file(bootstrap: str, names, run_id: str, agent: str, ws, name: str, calls: int = 3):
    """A runner whose agent keeps running ``cat`` on a file its workspace lacks (the shell tool's real output)."""
    import subprocess

    from loopwarden.runner import LoopClient

    async with LoopClient(bootstrap=bootstrap, events_topic=names.events, control_topic=names.control) as client:
        run = client.run(agent, session_id=f"s-{run_id}", run_id=run_id)
        for n in range(calls):
            command = f"cat {ws / 'data' / name}"
            done = subprocess.run(command.split(), cwd=ws, capture_output=True, text=True, check=False)
            assert done.returncode != 0 and str(ws) in done.stderr  # each agent's output names its own workspace
            call = await run.tool_call("exec", {"command": command, "attempt": n}, tool_call_id=f"{run_id}-{n}")
            await run.tool_result(call, error=done.stderr)
        await run.end()


def test_agents_in_their_own_workspaces_open_one_incident_as_replay_does(tansu, names, workers, tmp_path):
    import asyncio

    config = tmp_path / "fleet.json"
    config.write_text(json.dumps(WORKSPACE_DOC))
    worker = workers(names, "solo", config=config)
    worker.wait_ready()
    # five runs of three agents miss data/input.csv, four runs of two agents miss data/labels.csv: nine
    # runs fail, but only the first failure has minRuns runs
    plan = [(f"in-{i}", f"agent-{i % 3}", "input.csv") for i in range(5)]
    plan += [(f"lab-{i}", f"agent-{3 + i % 2}", "labels.csv") for i in range(4)]

    async def fleet() -> None:
        for i, (run_id, agent, name) in enumerate(plan):
            ws = agent_workspace(tmp_path / "agents" / run_id, i)
            await _loop_on_missing_file(tansu, names, run_id, agent, ws, name)

    asyncio.run(fleet())
    records = incident_records(tansu, names.incidents, lambda rs: len(opened(rs)) >= 1)
    assert len(opened(records)) == 1 and [r["state"] for r in records] == ["open"], records
    (rec,) = records
    assert sorted(rec["run_keys"]) == [f"in-{i}" for i in range(5)] and rec["agent_count"] == 3
    assert rec["fingerprint"].startswith("n1:") and rec["fingerprint_kind"] == "normalized-1"
    assert rec["example"] == "cat: …/input.csv: No such file or directory"
    assert str(tmp_path) not in json.dumps(rec)  # no workspace path reaches the record
    series = (
        f'loopwarden_open_incident_fingerprints{{fingerprint="{rec["fingerprint"]}",kind="normalized-1",tool="exec"}}'
    )
    assert worker.wait_metric(series, 5) == 5

    # replay --incidents over what the runners published gives the same incident
    published = [r.value.decode() for r in collect(tansu, names.events, until=lambda rs: len(rs) >= 9 * 7)]
    replayed = [
        r
        for r in replay_lines(published, FleetConfig.from_document(WORKSPACE_DOC), incidents=True)
        if isinstance(r, dict) and r.get("type") == "incident"
    ]
    assert [(r["incident_id"], r["state"]) for r in replayed] == [(rec["incident_id"], "open")]
    keep = ("signature", "fingerprint", "fingerprint_kind", "example", "run_count", "agent_count", "first_seen")
    assert {k: replayed[0][k] for k in keep} == {k: rec[k] for k in keep}
