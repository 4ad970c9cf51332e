"""Fleet incidents and cross_run_repeat: the pure code (loopwarden.fleet) and ``replay --incidents``."""

from __future__ import annotations

import json

import msgspec
import pytest

from loopwarden.detection import RunState, decode_state, step
from loopwarden.fleet import crossrun, incidents
from loopwarden.fleet.joins import fingerprint, run_signals
from loopwarden.fleet.offline import FleetSide
from loopwarden.replay import replay_lines
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import decode_event
from loopwarden.schemas.extensions import CrossRun, Incidents
from loopwarden.schemas.fleet import FinishedRun, JoinSignal, outcome_signature, print_signature, unknown_signature

EXT_ON = FleetConfig.from_document({"loopwarden": {"incidents": {"enabled": True}, "crossRun": {"enabled": True}}})
CFG = Incidents(enabled=True)  # minStreak 3, minRuns 5, minAgents 2, window 600


def pair(
    run: str,
    n: int,
    tool: str,
    params: dict,
    *,
    agent: str = "a1",
    ts: float = 0.0,
    error: str | None = None,
    result=None,
    session: str | None = None,
) -> list[dict]:
    base = {"agent_id": agent, "session_id": session or f"s-{run}", "run_id": run, "ts": ts}
    call_id = f"{run}-{n}"
    done = {"type": "tool_result", **base, "tool_name": tool, "tool_call_id": call_id, "params": params}
    if error is not None:
        done["error"] = error
    else:
        done["result"] = result
    return [{"type": "tool_call", **base, "tool_name": tool, "tool_call_id": call_id, "params": params}, done]


def drive(events: list[dict], fleet: FleetConfig = EXT_ON) -> tuple[list, RunState | None]:
    """Step one run's events; every signal run_signals emits, in order."""
    state, signals = None, []
    for e in events:
        event = decode_event(json.dumps(e))
        before = state
        result = step(state, event, fleet.resolve(event.agent_id))
        signals += run_signals(
            before if before is not None else result.state, event, result, fleet.extensions(event.agent_id)
        )
        state = result.state
    return signals, state


def failing_run(
    run: str,
    agent: str,
    ts: float,
    error: str = "503 Service Unavailable: upstream down",
    calls: int = 3,
    tool: str = "web_search",
) -> list[dict]:
    out = []
    for i in range(calls):  # arguments vary on every call: the failure is the same
        out += pair(run, i, tool, {"query": f"{run} try {i}"}, agent=agent, ts=ts + i, error=error)
    return out


# -- joining ---------------------------------------------------------------------------------------


def test_same_failure_with_varied_arguments_joins_once_at_min_streak():
    signals, state = drive(failing_run("r1", "a1", 100.0, calls=6))
    assert len(signals) == 1
    s = signals[0]
    assert isinstance(s, JoinSignal)
    assert (s.run_key, s.agent_id, s.tool_name, s.streak, s.unknown_tool) == ("r1", "a1", "web_search", 3, None)
    assert s.ts == 102.0  # the third result's event time
    assert s.signature == print_signature("web_search", s.fingerprint)  # the default: normalized
    assert (s.fingerprint_kind, s.outcome_hash) == ("normalized-1", None)
    assert s.sample == ""  # raw result text only with incidents.samples on
    assert state.joined == [s.signature]
    samples_on = FleetConfig.from_document({"loopwarden": {"incidents": {"enabled": True, "samples": True}}})
    (with_sample,), _ = drive(failing_run("r1", "a1", 100.0, calls=6), samples_on)
    assert "503 Service Unavailable" in with_sample.sample


def test_two_failures_do_not_reach_the_streak_together():
    events = failing_run("r1", "a1", 0.0, error="timeout", calls=2) + failing_run(
        "r1", "a1", 10.0, error="refused", calls=2
    )
    for i, e in enumerate(events):  # distinct call ids across the two halves
        e["tool_call_id"] = f"c{i // 2}"
    assert drive(events)[0] == []


def test_same_outcome_of_different_tools_is_two_signatures():
    events = failing_run("r1", "a1", 0.0, tool="read", calls=2) + failing_run("r1", "a1", 5.0, tool="exec", calls=2)
    for i, e in enumerate(events):
        e["tool_call_id"] = f"c{i // 2}"
    assert drive(events)[0] == []


def test_unknown_tool_joins_by_name():
    events = []
    for i in range(3):
        events += pair(
            "r1",
            i,
            "browser_navigate",
            {"url": f"https://x/{i}"},
            ts=float(i),
            error=f"Unknown tool: browser_navigate (attempt {i})",
        )
    signals, _ = drive(events)
    assert [(s.signature, s.unknown_tool) for s in signals] == [
        (unknown_signature("browser_navigate"), "browser_navigate")
    ]


def test_off_by_default_sends_nothing():
    assert drive(failing_run("r1", "a1", 0.0, calls=5), FleetConfig())[0] == []


def test_min_streak_is_the_agents_setting():
    fleet = FleetConfig.from_document(
        {
            "loopwarden": {"incidents": {"enabled": True}},
            "agents": {"list": [{"id": "a2", "loopwarden": {"incidents": {"minStreak": 5}}}]},
        }
    )
    assert len(drive(failing_run("r1", "a1", 0.0, calls=3), fleet)[0]) == 1
    assert drive(failing_run("r2", "a2", 0.0, calls=4), fleet)[0] == []
    assert len(drive(failing_run("r3", "a2", 0.0, calls=5), fleet)[0]) == 1


def test_old_stored_run_state_still_decodes():
    class OldRunState(msgspec.Struct, array_like=True):  # RunState before `joined`
        history: list = msgspec.field(default_factory=lambda: [[], [], [], [], []])
        buckets: dict = msgspec.field(default_factory=dict)
        guard: list = msgspec.field(default_factory=lambda: [0, [], False])
        blocked: list = msgspec.field(default_factory=list)
        seen: list = msgspec.field(default_factory=lambda: ["e1"])

    state = decode_state(msgspec.msgpack.encode(OldRunState()))
    assert state.has_seen("e1") and len(state.seen) == 8 and state.joined is None


# -- the incident state machine --------------------------------------------------------------------


def join(run: str, agent: str, ts: float, signature: str = outcome_signature("web_search", "error:abc")) -> JoinSignal:
    return JoinSignal(
        signature=signature,
        run_key=run,
        agent_id=agent,
        ts=ts,
        tool_name="web_search",
        outcome_hash="error:abc",
        sample="503",
    )


def feed(signals, cfg: Incidents = CFG, st=None):
    records = []
    for s in signals:
        st, out = incidents.apply_join(st, s, cfg)
        records += out
    return st, records


def test_opens_at_min_runs_of_min_agents():
    joins = [join(f"r{i}", f"a{i % 2}", 10.0 + i) for i in range(5)]
    st, records = feed(joins[:4])
    assert records == []
    st, records = feed(joins[4:], st=st)
    [rec] = records
    assert (rec.state, rec.run_count, rec.agent_count) == ("open", 5, 2)
    assert rec.run_keys == ["r0", "r1", "r2", "r3", "r4"] and sorted(rec.agent_ids) == ["a0", "a1"]
    assert (rec.first_seen, rec.last_seen, rec.ts) == (10.0, 14.0, 14.0)
    assert (rec.tool_name, rec.outcome_hash, rec.sample) == ("web_search", "error:abc", "503")


def test_one_agent_alone_opens_nothing():
    assert feed([join(f"r{i}", "a1", float(i)) for i in range(12)])[1] == []


def test_joins_further_apart_than_the_window_never_open():
    cfg = Incidents(enabled=True, window=60.0)
    st, records = feed([join(f"r{i}", f"a{i}", 100.0 * i) for i in range(10)], cfg)
    assert records == [] and len(st.recent) == 1


def test_later_joins_update_and_silence_resolves():
    st, records = feed([join(f"r{i}", f"a{i % 3}", float(i)) for i in range(7)])
    assert [r.state for r in records] == ["open", "update", "update"]
    assert [r.run_count for r in records] == [5, 6, 7]
    assert records[-1].agent_count == 3
    st, out = incidents.expire(st, 6.0 + 599.0, CFG)
    assert out == [] and st is not None
    st, out = incidents.expire(st, 6.0 + 600.0, CFG)
    assert st is None and [(r.state, r.incident_id) for r in out] == [("resolved", records[0].incident_id)]


def test_a_redelivered_join_changes_nothing():
    joins = [join(f"r{i}", f"a{i % 2}", float(i)) for i in range(6)]
    st, records = feed(joins)
    st, again = feed(joins, st=st)
    assert again == [] and st.run_count == 6


def test_incident_id_is_deterministic_and_differs_per_signature():
    joins = [join(f"r{i}", f"a{i % 2}", float(i)) for i in range(5)]
    first = feed(joins)[1][0].incident_id
    assert feed(joins)[1][0].incident_id == first  # a replay after a crash: same incident
    other = [join(f"r{i}", f"a{i % 2}", float(i), signature=outcome_signature("exec", "error:def")) for i in range(5)]
    assert feed(other)[1][0].incident_id != first
    later = [join(f"r{i}", f"a{i % 2}", 1000.0 + i) for i in range(5)]
    assert feed(later)[1][0].incident_id != first  # a new outage of the same signature


def test_the_same_joins_in_another_order_open_the_same_incident():
    # the runs' signals reach the signature's partition from several run partitions, in any order
    joins = [join(f"r{i}", f"a{i % 2}", 10.0 + i) for i in range(5)]
    [in_order] = feed(joins)[1]
    [shuffled] = feed([joins[4], joins[1], joins[3], joins[0], joins[2]])[1]
    assert shuffled == in_order and in_order.ts == 14.0


def test_a_join_after_the_window_resolves_before_counting():
    st, records = feed([join(f"r{i}", f"a{i % 2}", float(i)) for i in range(5)])
    st, out = incidents.apply_join(st, join("late", "a9", 2000.0), CFG)
    assert [r.state for r in out] == ["resolved"]
    assert st.incident_id is None and [j.run_key for j in st.recent] == ["late"]


# -- cross_run_repeat ------------------------------------------------------------------------------


def finished(session: str, run: str, fp: str, n: int = 4, ts: float | None = None) -> FinishedRun:
    return FinishedRun(
        session_key=session,
        run_key=run,
        agent_id="a1",
        ts=float(run[1:]) if ts is None else ts,
        fingerprint=fp,
        records=n,
        session_id=session,
        run_id=run,
    )


def observe_all(runs, cfg=None):
    """Per arriving run: the one verdict it caused, or None."""
    cfg = cfg if cfg is not None else CrossRun(enabled=True)
    st, verdicts = None, []
    for r in runs:
        st, v = crossrun.observe(st, r, cfg)
        assert len(v) <= 1
        verdicts.append(v[0] if v else None)
    return verdicts


def test_cross_run_out_of_order_arrival_warns_the_same_runs():
    runs = [finished("s", f"r{i}", "fp") for i in range(4)]
    in_order = [v.run_id for v in observe_all(runs) if v]
    st, late = None, []
    for r in [runs[1], runs[2], runs[3], runs[0]]:  # r0 ended first but arrives last
        st, v = crossrun.observe(st, r, CrossRun(enabled=True))
        late += [x.run_id for x in v]
    assert sorted(late) == in_order == ["r2", "r3"]


def test_cross_run_warns_the_newest_of_three_equal_runs():
    v = observe_all([finished("s", f"r{i}", "fp") for i in range(4)])
    assert v[:2] == [None, None]
    assert (v[2].action, v[2].detector, v[2].run_id, v[2].level, v[2].count) == (
        "warn",
        "cross_run_repeat",
        "r2",
        "warning",
        3,
    )
    assert v[3].run_id == "r3"


def test_cross_run_different_or_empty_runs_do_not_warn():
    assert (
        observe_all([finished("s", "r0", "fp"), finished("s", "r1", "other"), finished("s", "r2", "fp")]) == [None] * 3
    )
    assert observe_all([finished("s", f"r{i}", "", 0) for i in range(5)]) == [None] * 5
    assert observe_all([finished("s", "r0", "fp"), finished("s", "r0", "fp"), finished("s", "r0", "fp")]) == [None] * 3


def test_fingerprint_is_a_multiset_of_records():
    a = drive(pair("r1", 0, "read", {"p": 1}, result="x") + pair("r1", 1, "read", {"p": 2}, result="y"))[1]
    b = drive(pair("r2", 0, "read", {"p": 2}, result="y") + pair("r2", 1, "read", {"p": 1}, result="x"))[1]
    c = drive(pair("r3", 0, "read", {"p": 1}, result="x") + pair("r3", 1, "read", {"p": 1}, result="x"))[1]
    assert fingerprint(a.history) == fingerprint(b.history)
    assert fingerprint(a.history)[0] != fingerprint(c.history)[0]
    assert fingerprint(RunState().history) == ("", 0)


def heartbeat(session: str, run: str, ts: float, day: int = 0) -> list[dict]:
    events = pair(run, 0, "read", {"path": "HEARTBEAT.md"}, ts=ts, session=session, result="nothing to do") + pair(
        run, 1, "exec", {"command": "check-inbox"}, ts=ts + 1, session=session, result=f"0 new{'' if not day else day}"
    )
    return events + [{"type": "run_end", "agent_id": "a1", "session_id": session, "run_id": run, "ts": ts + 2}]


def test_cross_run_never_feeds_the_within_run_detectors():
    doc = {
        "tools": {
            "loopDetection": {
                "enabled": True,
                "warningThreshold": 2,
                "criticalThreshold": 3,
                "globalCircuitBreakerThreshold": 4,
            }
        },
        "loopwarden": {"crossRun": {"enabled": True}},
    }
    trace = [json.dumps(e) for d in range(3) for e in heartbeat("hb", f"day{d}", 1000.0 * d)]
    with_fleet = list(replay_lines(trace, FleetConfig.from_document(doc), incidents=True))
    plain = list(replay_lines(trace, FleetConfig.from_document(doc)))
    assert [r for r in with_fleet if "type" not in r] == plain == []
    [verdict] = [r for r in with_fleet if r.get("type") == "verdict"]
    assert (verdict["detector"], verdict["run_id"], verdict["session_id"]) == ("cross_run_repeat", "day2", "hb")


def test_cross_run_changed_work_breaks_the_streak():
    doc = {"loopwarden": {"crossRun": {"enabled": True}}}
    trace = [json.dumps(e) for d in range(3) for e in heartbeat("hb", f"day{d}", 1000.0 * d, day=d % 2)]
    assert [r for r in replay_lines(trace, FleetConfig.from_document(doc), incidents=True) if "type" in r] == []


# -- replay --incidents end to end, the fleet response ---------------------------------------------


def outage_trace(runs: int = 7, agents: int = 3, calls: int = 4) -> list[str]:
    events = []
    for r in range(runs):
        events += failing_run(f"run{r}", f"agent{r % agents}", 100.0 + 10 * r, calls=calls)
    events.append({"type": "tool_call", "agent_id": "x", "run_id": "quiet", "ts": 5000.0, "tool_name": "read"})
    return [json.dumps(e) for e in events]


def fleet_records(doc: dict, trace: list[str]) -> list[dict]:
    return [
        r
        for r in replay_lines(trace, FleetConfig.from_document(doc), incidents=True)
        if isinstance(r, dict) and "type" in r
    ]


def test_replay_incidents_open_update_resolve_in_event_time():
    recs = fleet_records({"loopwarden": {"incidents": {"enabled": True}}}, outage_trace())
    assert [r["state"] for r in recs] == ["open", "update", "update", "resolved"]
    assert len({r["incident_id"] for r in recs}) == 1
    assert recs[0]["run_count"] == 5 and recs[-1]["run_count"] == 7 and recs[-1]["agent_count"] == 3
    assert recs[-1]["event_index"] == len(outage_trace()) - 1  # resolved when time reached 5000


def test_replay_without_the_flag_or_with_it_off_is_unchanged():
    doc = {
        "tools": {
            "loopDetection": {
                "enabled": True,
                "warningThreshold": 3,
                "criticalThreshold": 5,
                "globalCircuitBreakerThreshold": 7,
            }
        }
    }
    from loopwarden.devtools.synthetic import fleet_events

    trace = [json.dumps({**e, "ts": float(i)}) for i, e in enumerate(fleet_events(agents=6, loop_share=0.9, seed=3))]
    plain = list(replay_lines(trace, FleetConfig.from_document(doc)))
    assert plain  # the trace does trigger OpenClaw's own detectors
    assert list(replay_lines(trace, FleetConfig.from_document(doc), incidents=True)) == plain


@pytest.mark.parametrize("block", [True, False])
def test_fleet_response_blocks_calls_that_feed_an_open_incident(block):
    doc = {"loopwarden": {"incidents": {"enabled": True, "block": block, "blockAfter": 3}}}
    trace = outage_trace(runs=7, calls=5)
    rows = [r for r in replay_lines(trace, FleetConfig.from_document(doc), incidents=True) if "detector" in r]
    opened = next(i for i, line in enumerate(fleet_records(doc, trace)) if line["state"] == "open")
    assert opened == 0
    if not block:
        assert rows == []
        return
    incident = fleet_records(doc, trace)[0]
    assert rows and all(r["detector"] == "fleet_incident" and r["action"] == "block" for r in rows)
    assert all(incident["incident_id"] in r["message"] for r in rows)
    # runs 0-4 open it at run4's 3rd result; from then on a 4th matching call is refused
    assert {r["run_id"] for r in rows} == {"run4", "run5", "run6"}
    assert all(r["count"] == 3 for r in rows)


def test_fleet_side_resolves_by_event_time_only():
    side = FleetSide(FleetConfig.from_document({"loopwarden": {"incidents": {"enabled": True, "window": 60}}}))
    out = []
    for i in range(5):
        out += side.receive(join(f"r{i}", f"a{i % 2}", 10.0 + i))
    assert [r.state for r in out] == ["open"]
    assert side.advance(70.0) == [] and side.advance(50.0) == []
    assert [r.state for r in side.advance(74.0)] == ["resolved"] and side.signatures == {}


# -- the simulator's scenarios ---------------------------------------------------------------------


def test_simulated_outage_opens_one_incident_and_heartbeat_warns():
    from loopwarden.devtools.simulate import endless_fleet, with_scenarios

    doc = {"loopwarden": {"incidents": {"enabled": True}, "crossRun": {"enabled": True}}}
    events = with_scenarios(endless_fleet(10, 0.3, 7), outage=6, heartbeat=2, every=300)
    trace = [json.dumps({**e, "ts": i * 0.01}) for i, e in zip(range(2000), events)]
    recs = fleet_records(doc, trace)
    opens = [r for r in recs if r.get("state") == "open"]
    assert len(opens) == 1 and opens[0]["tool_name"] == "web_search" and opens[0]["agent_count"] >= 2
    warned = {r["session_id"] for r in recs if r.get("detector") == "cross_run_repeat"}
    assert {"agent:heartbeat0-agent-000:cron", "agent:heartbeat0-agent-001:cron"} <= warned
    assert all(s.startswith("agent:heartbeat") for s in warned)
    # later rounds of the same outage feed the open incident instead of opening another
    assert any(r.get("state") == "update" and r["run_keys"][0].startswith("outage0") for r in recs)
    # the healthy fleet alone never makes an incident
    plain = [json.dumps({**e, "ts": i * 0.01}) for i, e in zip(range(2000), endless_fleet(10, 0.3, 7))]
    assert fleet_records(doc, plain) == []


def test_a_shadowed_fleet_response_reports_its_blocks_and_refuses_nothing():
    enforce = {"loopwarden": {"incidents": {"enabled": True, "block": True, "blockAfter": 3}}}
    shadow = {"loopwarden": {**enforce["loopwarden"], "shadow": ["fleet_incident"]}}
    trace = outage_trace(runs=7, calls=5)
    blocks = [r for r in replay_lines(trace, FleetConfig.from_document(enforce), incidents=True) if "detector" in r]
    shadowed = [r for r in replay_lines(trace, FleetConfig.from_document(shadow), incidents=True) if "detector" in r]
    assert blocks and all("shadow" not in r for r in blocks)
    assert shadowed and all(r["detector"] == "fleet_incident" and r["shadow"] for r in shadowed)
    # enforced, the 4th and 5th calls are refused and not recorded (both see 3 records); shadowed, the
    # 4th goes on and its failure is recorded, so the 5th sees 4
    assert [r["count"] for r in blocks if r["run_id"] == "run6"] == [3, 3]
    assert [r["count"] for r in shadowed if r["run_id"] == "run6"] == [3, 4]


def test_a_fleet_block_of_a_call_without_an_id_is_vetoed_by_the_next_result_without_one():
    from loopwarden.detection.incident_block import IncidentBoard, fleet_step
    from loopwarden.schemas.fleet import decode_incident

    doc = {"loopwarden": {"incidents": {"enabled": True, "block": True, "blockAfter": 3}}}
    fleet = FleetConfig.from_document(doc)
    board = IncidentBoard()
    for record in fleet_records(doc, outage_trace(runs=7, calls=5)):
        if record["state"] != "resolved":  # the incident as it stood while open
            board.apply(decode_incident(json.dumps(record).encode()))
    _, state = drive(failing_run("late", "agent9", 900.0, calls=3), fleet)
    call = {
        "type": "tool_call",
        "agent_id": "agent9",
        "run_id": "late",
        "tool_name": "web_search",
        "params": {"query": "late try 3"},
        "ts": 950.0,
    }  # no tool_call_id
    cfg, ext = fleet.resolve("agent9"), fleet.extensions("agent9")
    result = fleet_step(state, decode_event(json.dumps(call)), cfg, ext, board)
    assert [d.detector for d in result.detections] == ["fleet_incident"]
    assert state.blocked_without_id == 1  # matched by order, as the engine's own blocks


def test_a_shadowed_cross_run_repeat_is_reported_as_shadow():
    """``cross_run_repeat`` in ``loopwarden.shadow`` (or ``shadow: true``): the same warnings, marked
    shadow, so the worker records them on the shadow topic and the runner hears nothing."""
    from loopwarden.devtools.simulate import endless_fleet, with_scenarios

    events = with_scenarios(endless_fleet(6, 0.3, 7), heartbeat=2, every=300)
    trace = [json.dumps({**e, "ts": i * 0.01}) for i, e in zip(range(1500), events)]

    def warnings(loopwarden: dict) -> list[dict]:
        return [
            r
            for r in fleet_records({"loopwarden": {"crossRun": {"enabled": True}, **loopwarden}}, trace)
            if r.get("detector") == "cross_run_repeat"
        ]

    enforced = warnings({})
    assert enforced and not any(r.get("shadow") for r in enforced)
    for shadow in (["cross_run_repeat"], True):
        shadowed = warnings({"shadow": shadow})
        assert [r["verdict_id"] for r in shadowed] == [r["verdict_id"] for r in enforced]
        assert all(r["shadow"] is True for r in shadowed)
    assert warnings({"shadow": ["ping_pong"]}) == enforced  # another detector's shadow leaves it enforced


@pytest.mark.parametrize("shadow", [False, True])
def test_the_worker_publishes_a_shadowed_cross_run_repeat_on_the_shadow_topic(shadow):
    import asyncio
    import types

    from loopwarden.schemas.fleet import encode as encode_signal
    from loopwarden.worker.committer import Publisher
    from loopwarden.worker.fleet_agent import FleetRuntime
    from loopwarden.worker.metrics import Metrics
    from loopwarden.worker.settings import from_sources

    loopwarden = {"crossRun": {"enabled": True}, **({"shadow": ["cross_run_repeat"]} if shadow else {})}
    fleet = FleetConfig.from_document({"loopwarden": loopwarden})
    sent, stored = [], {}

    async def send(topic, key, value):
        sent.append((topic, msgspec.json.decode(value)))
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def write(items):
        stored.update({(p, k): v for p, k, v in items})

    metrics = Metrics(())
    runtime = types.SimpleNamespace(
        settings=from_sources({}, environ={}),
        fleet=lambda: fleet,
        publisher=Publisher(send),
        metrics=metrics,
        sessions=types.SimpleNamespace(get=lambda p, k: stored.get((p, k)), write=write),
        sessions_topic=types.SimpleNamespace(get_topic_name=lambda: "sessions"),
    )

    async def go():
        for i in range(3):
            run = finished("s", f"r{i}", "fp")
            await FleetRuntime.on_session(runtime, 0, b"s", encode_signal(run))

    asyncio.run(go())
    s = runtime.settings
    assert [(topic, v["detector"], v.get("shadow", False)) for topic, v in sent] == [
        (s.shadow_topic if shadow else s.control_topic, "cross_run_repeat", shadow)
    ]
    mode = "shadow" if shadow else "enforce"
    assert (
        metrics.registry.get_sample_value(
            "loopwarden_verdicts_total", {"action": "warn", "detector": "cross_run_repeat", "mode": mode}
        )
        == 1
    )


def test_fleet_publishes_ride_out_a_broker_outage_and_state_waits_for_them():
    """A cross-run warning whose delivery fails (the broker away) is retried with backoff, as the batch
    path's verdicts are, counted, and the session state that produced it is written only once it is
    out: before, the failure raised out of the fleet agent and the warning was lost."""
    import asyncio
    import types

    from aiokafka.errors import KafkaConnectionError

    from loopwarden.schemas.fleet import encode as encode_signal
    from loopwarden.worker.committer import Publisher, PublishPolicy
    from loopwarden.worker.fleet_agent import FleetRuntime
    from loopwarden.worker.metrics import Metrics
    from loopwarden.worker.settings import from_sources

    fleet = FleetConfig.from_document({"loopwarden": {"crossRun": {"enabled": True}}})
    log, failures, stored = [], [KafkaConnectionError(), KafkaConnectionError()], {}

    async def send(topic, key, value):
        done = asyncio.get_running_loop().create_future()
        if failures:
            done.set_exception(failures.pop())
        else:
            log.append(("sent", msgspec.json.decode(value)["detector"]))
            done.set_result(None)
        return done

    async def write(items):
        log.append(("state", len(items)))
        stored.update({(p, k): v for p, k, v in items})

    metrics = Metrics(())
    retry = lambda out, exc: metrics.publish_retries.labels(out.topic).inc()  # noqa: E731 - as the runtime's
    runtime = types.SimpleNamespace(
        settings=from_sources({}, environ={}),
        fleet=lambda: fleet,
        publisher=Publisher(send, PublishPolicy(backoff_initial=0.001), on_retry=retry),
        metrics=metrics,
        sessions=types.SimpleNamespace(get=lambda p, k: stored.get((p, k)), write=write),
        sessions_topic=types.SimpleNamespace(get_topic_name=lambda: "sessions"),
    )

    async def go():
        for i in range(3):
            await FleetRuntime.on_session(runtime, 0, b"s", encode_signal(finished("s", f"r{i}", "fp")))

    asyncio.run(go())
    assert log[-2:] == [("sent", "cross_run_repeat"), ("state", 1)]  # delivered, then the state
    assert set(stored) == {(0, b"s")}  # the session's state, under the session's key
    control = runtime.settings.control_topic
    assert metrics.registry.get_sample_value("loopwarden_publish_retries_total", {"topic": control}) == 2


# -- failure fingerprints (loopwarden.fleet.fingerprint) ---------------------------------------------


def workspace_failure(i: int, name: str = "input.csv") -> str:
    """One failure as agent ``i`` sees it from its own workspace, home, request and clock."""
    return (
        f"ENOENT: no such file or directory, open '/srv/agents/agent-{i}/ws-{i * 7919:x}/data/{name}' "
        f"(request_id=req_{i:04d}f8a9c2e1b7d4, at 2026-12-06T03:{i % 60:02d}:1{i % 10}Z, pid {4000 + 37 * i})"
    )


def workspace_trace(mode: str | None, name=lambda i: "input.csv", runs: int = 6, calls: int = 4) -> list[str]:
    events = []
    for r in range(runs):
        for c in range(calls):  # the same run also prints other ids and times on every call
            events += pair(
                f"run{r}",
                c,
                "read",
                {"path": "data/x"},
                agent=f"agent{r % 3}",
                ts=100.0 + 10 * r + c,
                error=workspace_failure(r * 10 + c, name(r)),
            )
    return [json.dumps(e) for e in events]


def fingerprint_doc(mode: str | None, **incidents) -> dict:
    block = {"incidents": {"enabled": True, **incidents}}
    return {"loopwarden": {**block, "fleet": {"fingerprint": mode}} if mode else block}


def test_runs_in_their_own_workspaces_open_one_incident_with_the_fingerprint():
    records = fleet_records(fingerprint_doc(None), workspace_trace(None))
    assert [r["state"] for r in records] == ["open", "update"]
    assert len({r["incident_id"] for r in records}) == 1 and records[-1]["run_count"] == 6
    rec = records[0]
    assert rec["fingerprint"].startswith("n1:") and rec["fingerprint_kind"] == "normalized-1"
    assert rec["signature"] == print_signature("read", rec["fingerprint"]) and rec["outcome_hash"] is None
    # the operator sees what failed, without a workspace path, request id, time or pid
    assert rec["example"].startswith("ENOENT: no such file or directory, open '…/input.csv'")
    assert "agent-" not in rec["example"] and "req_" not in rec["example"] and "2026" not in rec["example"]
    assert rec["sample"] == ""  # the raw text stays opt-in (incidents.samples)


def test_exact_keeps_the_outcome_hash_grouping_where_such_runs_never_meet():
    assert fleet_records(fingerprint_doc("exact"), workspace_trace("exact")) == []
    same_bytes = [json.dumps(e) for r in range(6) for e in failing_run(f"run{r}", f"agent{r % 3}", 100.0 + 10 * r)]
    (rec, *_) = fleet_records(fingerprint_doc("exact"), same_bytes)
    assert rec["signature"] == outcome_signature("web_search", rec["outcome_hash"])
    assert (rec["fingerprint"], rec["fingerprint_kind"]) == (rec["outcome_hash"], "exact")
    assert rec["example"] == "503 Service Unavailable: upstream down"


def test_different_failures_open_no_incident_together():
    # three runs miss input.csv, three miss labels.csv: 3 < minRuns each, 6 together
    records = fleet_records(
        fingerprint_doc(None), workspace_trace(None, lambda r: "input.csv" if r % 2 else "labels.csv")
    )
    assert records == []
    assert len(fleet_records(fingerprint_doc(None, minRuns=3), workspace_trace(None, lambda r: ("a", "b")[r % 2]))) == 2


def test_per_run_verdicts_and_hashes_do_not_change_with_the_fingerprint():
    doc = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}}}
    trace = workspace_trace(None, runs=3, calls=5)
    plain = list(replay_lines(trace, FleetConfig.from_document(doc)))
    assert plain  # OpenClaw's own detectors fire on the trace (the same arguments every call)
    for mode in ("normalized", "exact"):
        with_fleet = {
            **doc,
            **fingerprint_doc(mode),
            "loopwarden": {**fingerprint_doc(mode)["loopwarden"], "crossRun": {"enabled": True}},
        }
        rows = [
            r for r in replay_lines(trace, FleetConfig.from_document(with_fleet), incidents=True) if "type" not in r
        ]
        assert rows == plain
    fleet = FleetConfig.from_document(fingerprint_doc(None))
    states = {}
    for mode_doc in (doc, fingerprint_doc(None)):
        f = FleetConfig.from_document(mode_doc)
        state = None
        for line in trace:
            event = decode_event(line)
            result = step(state, event, f.resolve(event.agent_id))
            run_signals(state if state is not None else result.state, event, result, f.extensions(event.agent_id))
            state = result.state
        states[bool(mode_doc.get("loopwarden"))] = state
    assert states[True].history == states[False].history  # OpenClaw's hashes, untouched
    assert states[False].prints is None and states[True].prints
    assert fleet.extensions("a").fleet.fingerprint == "normalized"


def test_a_runs_fingerprints_are_bounded_by_its_window():
    events = []
    for c in range(200):  # 200 distinct outcomes, the window holds 30
        events += pair("r1", c, "read", {"path": f"f{c}"}, ts=float(c), error=f"error {c}: boom")
    _, state = drive(events)
    assert len(state.history) == 30
    assert set(state.history.results) <= set(state.prints) and len(state.prints) <= 30 + 16


def test_the_fleet_block_counts_records_by_fingerprint_and_never_shows_the_example():
    doc = fingerprint_doc(None, block=True, blockAfter=3)
    trace = workspace_trace(None, runs=7, calls=5)
    incident = fleet_records(doc, trace)[0]
    rows = [r for r in replay_lines(trace, FleetConfig.from_document(doc), incidents=True) if "detector" in r]
    assert rows and all(r["detector"] == "fleet_incident" and r["action"] == "block" for r in rows)
    assert {r["run_id"] for r in rows} == {"run4", "run5", "run6"} and all(r["count"] == 3 for r in rows)
    assert all(incident["incident_id"] in r["message"] and "input.csv" not in r["message"] for r in rows)


def test_cross_run_repeat_sees_runs_whose_outputs_differ_only_in_times_and_ids():
    def trace(mode: str) -> list[dict]:
        doc = {"loopwarden": {"crossRun": {"enabled": True}, "fleet": {"fingerprint": mode}}}
        events = []
        for d in range(3):
            for c in range(2):
                events += pair(
                    f"day{d}",
                    c,
                    "exec",
                    {"command": f"step {c}"},
                    session="nightly",
                    ts=1000.0 * d + c,
                    result=f"job {d:08x}-6a1e-4c2b-9f00-{d:012x} finished step {c} at 2026-12-0{d + 1}T02:00:0{c}Z",
                )
            events.append(
                {
                    "type": "run_end",
                    "agent_id": "a1",
                    "session_id": "nightly",
                    "run_id": f"day{d}",
                    "ts": 1000.0 * d + 5,
                }
            )
        lines = [json.dumps(e) for e in events]
        return [r for r in replay_lines(lines, FleetConfig.from_document(doc), incidents=True) if r.get("detector")]

    assert [r["run_id"] for r in trace("normalized")] == ["day2"]
    assert trace("exact") == []


def test_a_bad_fingerprint_setting_is_reported_and_falls_back_to_the_default():
    from loopwarden.schemas.extensions import resolve_extensions

    ext, problems = resolve_extensions({"fleet": {"fingerprint": "fuzzy"}})
    assert ext.fleet.fingerprint == "normalized" and problems and "loopwarden.fleet" in problems[0]
    assert resolve_extensions({"fleet": {"fingerprint": "exact"}})[0].fleet.fingerprint == "exact"
