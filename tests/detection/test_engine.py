"""Spec §1.8, §6 (history), §9 (caller), §10 (guard), §11 (scoping), §12, §13 through ``step()``
and ``replay_lines()``."""

from __future__ import annotations

import json

from loopwarden.detection import step
from loopwarden.detection.buckets import dedup_key, should_emit
from loopwarden.replay import replay_lines
from loopwarden.schemas.config import FleetConfig
from tests.support.helpers import (
    LOW,
    ON,
    Run,
    cfg,
    event,
    msg_compaction,
    msg_generic_warning,
    msg_pp_critical,
    sig,
    text_hash,
    text_result,
)

RECORD_ONLY = {}
READ_A = ("read", {"path": "a.txt"})
S_READ_A = sig("read", '{"path":"a.txt"}')
GREP = ("grep", {"pattern": "TODO"})
SAME = text_result("same")
H_SAME = text_hash("same")


def one(dets):
    assert len(dets) == 1, dets
    return dets[0]


# ---------------------------------------------------------------- §1.8 config per step


def test_rule_1_8_history_trimmed_to_size_in_force_at_record_time():
    run = Run(RECORD_ONLY)
    for _ in range(12):
        run.call(*READ_A)
    run.call(*READ_A, block={"historySize": 5})  # recorded, then trimmed to 5
    d = one(run.call(*READ_A, block={"enabled": True, "warningThreshold": 2}))
    assert d.count == 5


def test_rule_1_8_thresholds_read_on_every_detect():
    run = Run(RECORD_ONLY)
    for _ in range(3):
        run.call(*READ_A)
    assert run.call(*READ_A, block={"enabled": True, "warningThreshold": 5}) == []
    assert one(run.call(*READ_A, block={"enabled": True, "warningThreshold": 4})).count == 4


# ---------------------------------------------------------------- §6 history


def test_rule_6_2_calls_trimmed_from_oldest_end():
    run = Run({"enabled": True, "historySize": 5, "warningThreshold": 2, "criticalThreshold": 3})
    for _ in range(3):
        run.call(*READ_A)
    for i in range(4):
        run.call("read", {"path": f"other{i}"})
    # window now holds 1 READ_A call and 4 others
    assert run.call(*READ_A) == []


def test_rule_6_3_result_fills_the_record_with_its_call_id():
    unk1 = {"enabled": True, "unknownToolThreshold": 1}
    run = Run(RECORD_ONLY)
    run.call("x", {}, id="c1")
    run.call("x", {}, id="c2")
    run.result("x", {}, error="Unknown tool: gone", id="c1")  # fills c1 (older); newest c2 stays pending
    assert run.call("x", {}, block=unk1) == []


def test_rule_6_3_result_without_call_id_fills_newest_pending():
    unk1 = {"enabled": True, "unknownToolThreshold": 1}
    run = Run(RECORD_ONLY)
    run.call("x", {}, id="c1")
    run.call("x", {}, id="c2")
    run.result("x", {}, error="Unknown tool: gone")  # no call id: newest matching pending record (c2)
    d = one(run.call("x", {}, block=unk1))
    assert (d.detector, d.count, d.warning_key) == ("unknown_tool_repeat", 1, "unknown-tool:x:gone")


def test_rule_6_3_rewritten_params_append_a_new_record():
    unk1 = {"enabled": True, "unknownToolThreshold": 1, "warningThreshold": 3}
    run = Run(RECORD_ONLY)
    run.call("x", {"a": 1}, id="c1")
    run.result("x", {"a": 2}, error="Unknown tool: gone", id="c1")  # argsHash differs: appended
    d = one(run.call("x", {"b": 0}, block=unk1))
    assert d.detector == "unknown_tool_repeat"
    run2 = Run(RECORD_ONLY)
    run2.call("x", {"a": 1}, id="c1")
    run2.call("x", {"a": 1}, id="c2")
    run2.result("x", {"a": 2}, result="ok", id="c1")
    # both {"a":1} calls still pending and counted (ping-pong off: x{a:2}, x{a:1} would alternate)
    d = one(run2.call("x", {"a": 1}, block={"enabled": True, "warningThreshold": 2, "detectors": {"pingPong": False}}))
    assert (d.detector, d.count) == ("generic_repeat", 2)


def test_rule_6_3_record_with_result_is_not_matched_again():
    run = Run(RECORD_ONLY)
    run.call(*READ_A, id="c1")
    run.result(*READ_A, result="ok", id="c1")
    run.result(*READ_A, result="ok", id="c1")  # c1 already has a resultHash: appended
    d = one(run.call(*READ_A, block={"enabled": True, "warningThreshold": 2, "detectors": {"pingPong": False}}))
    assert d.count == 2


def test_rule_6_3_tool_name_must_match():
    run = Run(RECORD_ONLY)
    run.call("x", {}, id="c1")
    run.result("y", {}, error="Unknown tool: gone", id="c1")  # different tool: appended as a y record
    assert one(run.call("y", {}, block={"enabled": True, "unknownToolThreshold": 1})).detector == "unknown_tool_repeat"
    assert run.call("x", {}, block={"enabled": True, "unknownToolThreshold": 1}) == []


def test_rule_6_3_1_no_hash_changes_nothing_but_null_result_is_recorded():
    cfg2 = {"enabled": True, "warningThreshold": 2}
    run = Run(RECORD_ONLY)
    for _ in range(3):
        run.result(*READ_A)  # result missing: no hash, nothing recorded
    assert run.call(*READ_A, block=cfg2) == []
    run = Run(RECORD_ONLY)
    for _ in range(3):
        run.result(*READ_A, result=None)  # null is hashed: orphan records appended
    assert one(run.call(*READ_A, block=cfg2)).count == 3


def test_rule_6_3_5_outcome_append_trims_to_history_size():
    run = Run({"historySize": 3})
    for _ in range(6):
        run.result(*READ_A, result="same")
    d = one(run.call(*READ_A, block={"enabled": True, "historySize": 3, "warningThreshold": 2, "criticalThreshold": 3}))
    assert (d.level, d.count) == ("critical", 3)


# ---------------------------------------------------------------- §9.1 tool names


def test_rule_9_1_names_trimmed_lowercased_and_aliased():
    run = Run(ON)
    for name in ("bash", " Bash ", "EXEC", "exec", "bash") * 2:
        run.call(name, {"command": "make"})
    d = one(run.call("BASH", {"command": "make"}))
    assert (d.tool_name, d.count) == ("exec", 10)
    assert d.warning_key == "generic:exec:" + sig("exec", '{"command":"make"}')
    assert d.message == msg_generic_warning("exec", 10)


def test_rule_9_1_apply_patch_alias():
    run = Run(ON)
    for name in ("apply-patch", "apply_patch") * 5:
        run.call(name, {"patch": "p"})
    assert one(run.call("Apply-Patch", {"patch": "p"})).tool_name == "apply_patch"


def test_rule_9_1_missing_name_is_tool_and_missing_params_are_empty_object():
    run = Run(ON)
    for i in range(10):
        run.call(None) if i % 2 else run.call(None, {})
    d = one(run.call(None))
    assert d.tool_name == "tool"
    assert d.warning_key == "generic:tool:tool:" + "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"


def test_rule_9_1_bash_results_use_exec_projection():
    run = Run(RECORD_ONLY)
    for pid in range(3):
        run.pair("bash", {"command": "make"}, result={"details": {"status": "running", "tail": "t", "pid": pid}})
    d = one(run.call("bash", {"command": "make"}, block=LOW))
    assert (d.level, d.detector, d.count) == ("critical", "generic_repeat", 3)


# ---------------------------------------------------------------- §9.3 critical


def blocked_run():
    """Defaults: 20 identical outcomes recorded, so the next identical call is blocked at count 20."""
    run = Run(ON)
    for _ in range(20):
        run.pair(*READ_A, result=SAME)
    return run


def test_rule_9_3_critical_not_recorded_and_sticky():
    run = blocked_run()
    for _ in range(5):
        d = one(run.call(*READ_A))
        assert (d.level, d.count, d.action, d.emitted) == ("critical", 20, "block", True)


def test_rule_9_3_synthesized_blocked_result_is_ignored():
    run = blocked_run()
    one(run.call(*READ_A, id="blk"))
    veto = {
        "content": [{"type": "text", "text": "CRITICAL"}],
        "details": {"status": "blocked", "deniedReason": "tool-loop", "reason": "CRITICAL"},
    }
    assert run.result(*READ_A, result=veto, id="blk") == []
    assert run.result(*READ_A, result=veto) == []  # even without a call id (§4.4)
    assert one(run.call(*READ_A)).count == 20


def test_rule_9_3_different_call_reevaluates():
    run = blocked_run()
    one(run.call(*READ_A))
    assert run.call("read", {"path": "other.txt"}) == []


def test_rule_9_3_leaving_ping_pong_via_non_blocked_side_gives_generic_warning():
    cfg4 = {"enabled": True, "warningThreshold": 2, "criticalThreshold": 4, "globalCircuitBreakerThreshold": 5}
    run = Run(RECORD_ONLY)
    for i in range(5):  # A G A G A
        tool, params = (READ_A, GREP)[i % 2]
        run.pair(tool, params, result=text_result(tool))
    d = one(run.call(*GREP, block=cfg4))
    assert (d.level, d.detector, d.count, d.message) == ("critical", "ping_pong", 6, msg_pp_critical(6))
    d = one(run.call(*READ_A, block=cfg4))  # the newest side again: no ping-pong; A seen 3 times
    assert (d.level, d.detector, d.count) == ("warning", "generic_repeat", 3)


# ---------------------------------------------------------------- §9.4 warning emission


def test_rule_9_4_emitted_at_10_20_30():
    run = Run(ON)
    emitted = []
    for i in range(33):
        dets = run.pair(*READ_A, result=text_result(f"v{i}"))  # changing results: never a block
        for d in dets:
            assert d.level == "warning" and d.detector == "generic_repeat"
            if d.emitted:
                emitted.append((i + 1, d.count))
    assert emitted == [(11, 10), (21, 20), (31, 30)]


def test_rule_9_4_low_thresholds_below_ten_never_emitted():
    run = Run({"enabled": True, "warningThreshold": 2, "criticalThreshold": 3})
    seen = []
    for _ in range(13):
        for d in run.call(*READ_A):
            seen.append((d.count, d.emitted))
    assert seen == [(n, n == 10) for n in range(2, 13)]


def test_rule_9_4_critical_does_not_touch_buckets():
    run = Run(RECORD_ONLY)
    for _ in range(20):
        run.pair("command_status", {"id": 1}, result=SAME)
    d = one(run.call("command_status", {"id": 1}, block=ON))
    assert (d.level, d.detector, d.count) == ("critical", "known_poll_no_progress", 20)
    raised = {"enabled": True, "criticalThreshold": 25, "globalCircuitBreakerThreshold": 40}
    d2 = one(run.call("command_status", {"id": 1}, block=raised))
    assert (d2.level, d2.count, d2.warning_key) == ("warning", 20, d.warning_key)  # same key as the critical
    assert d2.emitted is True  # bucket 2 > stored 0


def test_rule_9_4_one_emission_per_bucket_per_key():
    run = Run(RECORD_ONLY)
    for _ in range(10):
        run.pair("command_status", {"id": 1}, result=SAME)
    assert one(run.call("command_status", {"id": 1}, block=ON)).emitted is True
    # same poll key again at count 11 (bucket 1): suppressed
    run.result("command_status", {"id": 1}, result=SAME)
    assert one(run.call("command_status", {"id": 1}, block=ON)).emitted is False


def test_rule_9_4_dedup_key_uses_raw_run_id():
    assert dedup_key(" r1 ", "generic:read:read:x") == " r1 :generic:read:read:x"
    assert dedup_key("r1", "k") == "r1:k"
    assert dedup_key(None, "k") == "k"
    assert dedup_key("", "k") == "k"
    run = Run(ON, run_id=" r1 ")
    for _ in range(11):
        run.call(*READ_A)
    assert f" r1 :generic:read:{S_READ_A}" in run.state.buckets


def test_rule_9_4_bucket_map_evicts_oldest_inserted_key():
    buckets: dict[str, int] = {}
    assert should_emit(buckets, "k0", 10) is True
    for i in range(1, 256):
        assert should_emit(buckets, f"k{i}", 10) is True
    assert len(buckets) == 256
    assert should_emit(buckets, "k0", 20) is True  # update: does not refresh k0's position
    assert should_emit(buckets, "k0", 25) is False
    assert should_emit(buckets, "k256", 10) is True  # 257th key: oldest inserted (k0) dropped
    assert len(buckets) == 256 and "k0" not in buckets
    assert should_emit(buckets, "k1", 10) is False  # still there
    assert should_emit(buckets, "k0", 20) is True  # forgotten: emitted again


def test_rule_9_4_bucket_map_eviction_through_step():
    size = 257 * 11 + 50
    run = Run({"enabled": True, "historySize": size})
    for k in range(257):
        for n in range(11):
            dets = run.call("read", {"k": k})
            if n == 10:
                assert one(dets).emitted is True
    d1 = one(run.call("read", {"k": 1}))
    assert (d1.count, d1.emitted) == (11, False)
    d0 = one(run.call("read", {"k": 0}))
    assert (d0.count, d0.emitted) == (11, True)  # k0's key was evicted by the 257th key


# ---------------------------------------------------------------- §9.5 / §9.6 recording


def test_rule_9_5_calls_recorded_when_enabled_missing_not_when_false():
    for block, expected in (({}, [10]), ({"enabled": None}, [10]), ({"enabled": 0}, [10]), ({"enabled": False}, [])):
        run = Run(block)
        for _ in range(10):
            assert run.call(*READ_A) == []
        assert [d.count for d in run.call(*READ_A, block=ON)] == expected, block


def test_rule_9_6_outcomes_recorded_even_when_enabled_false():
    run = Run({"enabled": False})
    for _ in range(20):
        run.pair(*READ_A, result=SAME)  # calls not recorded; results appended as complete records
    d = one(run.call(*READ_A, block=ON))
    assert (d.level, d.count, d.warning_key) == ("critical", 20, f"generic:read:{S_READ_A}:{H_SAME}")


def test_rule_9_2_no_detection_when_not_enabled():
    for block in ({}, {"enabled": False}, {"enabled": None}):
        run = Run(block)
        for _ in range(40):
            assert run.pair(*READ_A, result=SAME) == []


# ---------------------------------------------------------------- §9.7 / §10 guard


def X(run, text="same", block=None):
    kw = {} if block is None else {"block": block}
    return run.pair(*READ_A, result=text_result(text), **kw)


def test_rule_10_2_guard_needs_arming():
    run = Run(RECORD_ONLY)
    for _ in range(6):
        assert X(run) == []


def test_rule_10_3_abort_on_window_size_th_identical_triple():
    run = Run(RECORD_ONLY)
    run.arm()
    assert X(run) == []
    assert X(run) == []
    d = one(X(run))
    assert (d.level, d.detector, d.count, d.action, d.emitted) == (
        "critical",
        "compaction_loop_persisted",
        3,
        "abort",
        True,
    )
    assert d.tool_name == "read"
    assert d.message == msg_compaction("read", 3, 3)
    assert d.message == (
        "CRITICAL: tool read repeated 3 times with identical arguments and identical results within "
        "3 attempts after auto-compaction. The compaction did not break the loop. Aborting to "
        "prevent runaway resource use."
    )


def test_rule_10_1_window_size_from_config():
    g5 = {"postCompactionGuard": {"windowSize": 5}}
    run = Run(g5)
    run.arm()
    for _ in range(4):
        assert X(run) == []
    d = one(X(run))
    assert (d.count, d.message) == (5, msg_compaction("read", 5, 5))
    run = Run({"postCompactionGuard": {"windowSize": 1}})
    run.arm()
    assert one(X(run)).count == 1


def test_rule_10_1_guard_active_when_enabled_missing_or_true_disabled_when_false():
    for block, aborts in (
        ({}, True),
        (None, True),
        ({"enabled": True}, True),
        ({"enabled": None}, True),
        ({"enabled": 0}, True),
        ({"enabled": False}, False),
    ):
        run = Run(block)
        run.arm()
        dets = X(run) + X(run) + X(run)
        assert [d.detector for d in dets] == (["compaction_loop_persisted"] if aborts else []), block


def test_rule_10_2_rearm_clears_window():
    run = Run(RECORD_ONLY)
    run.arm()
    X(run)
    X(run)
    run.arm()
    assert X(run) == []
    assert X(run) == []
    assert one(X(run)).count == 3


def test_rule_10_5_triple_after_window_closed_no_abort():
    run = Run(RECORD_ONLY)
    run.arm()
    assert X(run, "x") + X(run, "y") + X(run, "x") + X(run, "x") + X(run, "x") == []


def test_rule_10_5_changing_results_no_abort():
    run = Run(RECORD_ONLY)
    run.arm()
    assert X(run, "1") + X(run, "2") + X(run, "3") == []


def test_rule_10_3_different_args_or_tool_are_different_triples():
    run = Run(RECORD_ONLY)
    run.arm()
    run.pair("read", {"path": "a.txt"}, result=SAME)
    run.pair("read", {"path": "a.txt"}, result=SAME)
    assert run.pair("read", {"path": "b.txt"}, result=SAME) == []


def test_rule_10_4_only_first_abort_per_run():
    run = Run(RECORD_ONLY)
    run.arm()
    X(run)
    X(run)
    assert one(X(run)).detector == "compaction_loop_persisted"
    run.arm()
    assert X(run) + X(run) + X(run) + X(run) == []


def test_rule_9_7_unhashable_results_never_reach_guard():
    run = Run(RECORD_ONLY)
    run.arm()
    run.pair(*READ_A)  # result missing: no hash
    veto = {"details": {"status": "blocked", "deniedReason": "tool-loop"}}
    run.pair(*READ_A, result=veto)
    X(run)
    X(run)
    assert one(X(run)).count == 3  # the two unhashable outcomes did not use up attempts


def test_rule_10_5_blocked_calls_never_observed():
    run = Run(RECORD_ONLY)
    for _ in range(3):
        X(run)
    run.arm()
    for i in range(3):
        d = one(run.call(*READ_A, id=f"b{i}", block=LOW))  # blocked: generic critical
        assert d.action == "block"
        assert run.result(*READ_A, result=text_result("same"), id=f"b{i}", block=LOW) == []  # the veto
    # the guard still has its three attempts
    for text_ in ("g",) * 2:
        run.pair(*GREP, result=text_result(text_), block=LOW)
    d = one(run.pair(*GREP, result=text_result("g"), block=LOW)[-1:])
    assert (d.detector, d.count) == ("compaction_loop_persisted", 3)


def test_rule_10_5_activity_in_other_runs_does_not_count():
    lines = [
        {"type": "compaction_retry", "agent_id": "a", "session_id": "s", "run_id": "r1"},
        {"type": "tool_result", "agent_id": "a", "session_id": "s", "run_id": "r1", "tool_name": "read", "result": "x"},
        {"type": "tool_result", "agent_id": "a", "session_id": "s", "run_id": "r2", "tool_name": "read", "result": "x"},
        {"type": "tool_result", "agent_id": "a", "session_id": "s", "run_id": "r2", "tool_name": "read", "result": "x"},
        {"type": "tool_result", "agent_id": "a", "session_id": "s", "run_id": "r1", "tool_name": "read", "result": "x"},
        {"type": "tool_result", "agent_id": "a", "session_id": "s", "run_id": "r1", "tool_name": "read", "result": "x"},
    ]
    rows = list(replay_lines([json.dumps(x) for x in lines], FleetConfig()))
    assert [(r["event_index"], r["run_id"], r["detector"]) for r in rows] == [(5, "r1", "compaction_loop_persisted")]


# ---------------------------------------------------------------- §6.4 / §6.5 / §11 scoping


def rows_for(events, config=None):
    fleet = config or FleetConfig({"enabled": True})
    return [r for r in replay_lines([json.dumps(e) for e in events], fleet)]


def ev(type_, run=None, session="s1", agent="a1", **kw):
    d = {"type": type_, "agent_id": agent, **kw}
    if session is not None:
        d["session_id"] = session
    if run is not None:
        d["run_id"] = run
    return d


def test_rule_6_4_one_window_per_run_interleaved_runs():
    events = []
    for i in range(20):
        for run in ("r1", "r2"):
            events.append(ev("tool_call", run, tool_name="read", params={"path": "a.txt"}, tool_call_id=f"{run}-{i}"))
    rows = rows_for(events)
    # each run sees only its own calls: count 10 at its 11th call, up to 19 at its 20th
    r1 = [(r["count"], r["emitted"]) for r in rows if r["run_id"] == "r1"]
    r2 = [(r["count"], r["emitted"]) for r in rows if r["run_id"] == "r2"]
    assert r1 == r2 == [(n, n == 10) for n in range(10, 20)]


def test_rule_12_8_interleaved_runs_each_keep_thirty_records():
    events = []
    for _ in range(31):
        for run in ("r1", "r2"):
            events.append(ev("tool_call", run, tool_name="read", params={"path": "a.txt"}))
    rows = rows_for(events)
    assert [r["count"] for r in rows if r["run_id"] == "r1"][-1] == 30


def test_rule_6_5_run_id_trimmed_blank_is_unscoped():
    events = []
    for i in range(10):
        events.append(ev("tool_call", "r1" if i % 2 else "  r1 ", tool_name="read"))
    events.append(ev("tool_call", "r1", tool_name="read"))
    for i in range(10):
        events.append(ev("tool_call", "" if i % 2 else None, tool_name="read"))
    events.append(ev("tool_call", "   ", tool_name="read"))
    rows = rows_for(events)
    assert [(r["event_index"], r["count"]) for r in rows] == [(10, 10), (21, 10)]


def test_rule_11_1_session_key_session_id_else_agent_id():
    events = []
    for _ in range(10):
        events.append(ev("tool_call", None, session=None, agent="bot", tool_name="read"))
    events.append(ev("tool_call", None, session="other", agent="bot", tool_name="read"))  # other session
    events.append(ev("tool_call", None, session=None, agent="bot", tool_name="read"))
    events.append(
        ev("tool_call", None, session="bot", agent="x", tool_name="read")
    )  # session id "bot" == agent bot's session key, but another agent: its own history (state per agent)
    events.append(ev("tool_call", None, session="bot", agent="bot", tool_name="read"))  # bot's own session id
    rows = rows_for(events)
    assert [(r["event_index"], r["count"]) for r in rows] == [(11, 10), (13, 11)]


def test_rule_11_3_new_run_starts_at_zero_and_resumed_run_continues():
    events = [ev("tool_result", "r1", tool_name="read", result="same") for _ in range(20)]
    events.append(ev("tool_call", "r1", tool_name="read"))  # blocked, count 20
    events.append(ev("tool_call", "r2", tool_name="read"))  # new run: nothing
    events += [ev("tool_call", "r2", tool_name="read") for _ in range(3)]
    events.append(ev("tool_call", "r1", tool_name="read"))  # r1 resumes: still blocked
    rows = rows_for(events)
    assert [(r["event_index"], r["run_id"], r["level"], r["count"]) for r in rows] == [
        (20, "r1", "critical", 20),
        (25, "r1", "critical", 20),
    ]


def test_wire_run_end_drops_state():
    events = [ev("tool_call", "r1", tool_name="read") for _ in range(10)]
    events.append(ev("run_end", "r1"))
    events += [ev("tool_call", "r1", tool_name="read") for _ in range(10)]
    assert rows_for(events) == []


def test_wire_duplicate_event_id_dropped():
    run = Run(ON)
    for i in range(10):
        run.call(*READ_A, event_id="e1" if i < 5 else f"e{i}")  # e1 delivered five times: counts once
    assert run.call(*READ_A, event_id="e100") == []  # only 6 distinct calls recorded
    run2 = Run(RECORD_ONLY)
    run2.arm(), run2.pair(*READ_A, result=SAME)
    dup = event(
        "tool_result",
        agent_id="agent-1",
        run_id="run-1",
        tool_name="read",
        params={"path": "a.txt"},
        result=SAME,
        event_id="same-id",
    )
    assert run2.feed(dup) == []
    assert run2.feed(dup) == []  # would be the 3rd identical triple if not dropped
    assert one(X(run2)).detector == "compaction_loop_persisted"


# ---------------------------------------------------------------- §12


def test_rule_12_2_warning_counts_below_ten_not_emitted():
    run = build_poll(5)
    d = one(run.call("command_status", {"id": 1}, block={"enabled": True, "warningThreshold": 5}))
    assert (d.level, d.emitted) == ("warning", False)


def build_poll(n):
    run = Run(RECORD_ONLY)
    for _ in range(n):
        run.pair("command_status", {"id": 1}, result=SAME)
    return run


def test_rule_12_3_verdict_lands_on_threshold_plus_one():
    run = Run({"enabled": True, "warningThreshold": 3, "criticalThreshold": 5})
    levels = [[d.level for d in run.pair(*READ_A, result=SAME)] for _ in range(7)]
    assert levels == [[], [], [], ["warning"], ["warning"], ["critical"], ["critical"]]


def test_rule_12_7_changing_results_never_block():
    run = Run(ON)
    for i in range(60):
        for d in run.pair(*READ_A, result=text_result(f"t{i}")):
            assert d.level == "warning"


def test_rule_12_11_unknown_tool_keyed_by_called_tool_and_extracted_name():
    run = Run({"enabled": True, "unknownToolThreshold": 2})
    run.pair("mcp", {"q": 1}, error="Unknown tool: web_search")
    run.pair("mcp", {"q": 2}, error="Unknown tool: web_search")
    d = one(run.call("mcp", {"q": 3}))
    assert d.warning_key == "unknown-tool:mcp:web_search"
    assert (
        d.message
        == "CRITICAL: attempted unavailable tool web_search 2 times. Stop retrying that missing tool and answer without it."  # noqa: E501
    )


def test_rule_12_11_slash_names_never_counted():
    run = Run({"enabled": True, "unknownToolThreshold": 2})
    for i in range(4):
        run.pair("mcp", {"q": i}, error="Tool mcp/search not found")
    assert run.call("mcp", {"q": 9}) == []


def test_rule_12_6_reworded_plans_are_distinct_calls():
    run = Run({"enabled": True, "warningThreshold": 2})
    run.pair("update_plan", {"plan": [{"step": "Fix bug", "status": "in_progress"}]}, result="ok")
    run.pair("update_plan", {"plan": [{"step": "Fix the bug", "status": "in_progress"}]}, result="ok")
    assert run.call("update_plan", {"plan": [{"step": "Fix a bug", "status": "in_progress"}]}) == []


def test_rule_12_5_identical_sends_hash_equal_and_block():
    run = Run(LOW)
    for i in range(3):
        res = {
            "content": [{"type": "text", "text": f"Sent message {i}"}],
            "details": {"ok": True, "messageId": f"m{i}", "ts": 1000 + i},
        }
        run.pair("message", {"action": "send", "to": "#ops", "text": "deploy done"}, result=res)
    d = one(run.call("message", {"action": "send", "to": "#ops", "text": "deploy done"}))
    assert (d.level, d.detector, d.count) == ("critical", "generic_repeat", 3)


# ---------------------------------------------------------------- §13


def test_rule_13_1_parallel_batches_first_block_at_count_21():
    run = Run(ON)
    detections = []
    call_no = 0
    for batch in range(8):
        ids = []
        for j in range(3):
            call_no += 1
            cid = f"b{batch}-{j}"
            ids.append(cid)
            for d in run.call(*READ_A, id=cid):
                detections.append((call_no, d.level, d.count, d.emitted))
        for cid in ids:
            assert run.result(*READ_A, result=SAME, id=cid) == []
    warnings = [(n, c, e) for n, lvl, c, e in detections if lvl == "warning"]
    criticals = [(n, c) for n, lvl, c, e in detections if lvl == "critical"]
    # batch k (1-based) starts with 3(k-1) complete records; call j of the batch sees j-1 pending ones
    assert warnings == [
        (11, 10, True),
        (12, 11, False),
        (13, 12, False),
        (14, 13, False),
        (15, 14, False),
        (16, 15, False),
        (17, 16, False),
        (18, 17, False),
        (19, 18, False),
        (20, 19, False),
        (21, 20, True),
    ]
    assert criticals == [(22, 21), (23, 21), (24, 21)]


def test_rule_13_1_pending_records_break_unknown_streak_and_evidence():
    run = Run({"enabled": True, "unknownToolThreshold": 2})
    run.pair("t", {}, error="Unknown tool: q")
    run.pair("t", {}, error="Unknown tool: q")
    assert one(run.call("t", {}, id="p0")).detector == "unknown_tool_repeat"
    run.call("t", {}, id="p1", block={})  # recorded as pending (detection off)
    assert run.call("t", {}, id="p2") == []


def test_rule_13_2_orphan_results_count_toward_streaks():
    run = Run(RECORD_ONLY)
    for _ in range(3):
        run.result(*READ_A, result=SAME)
    d = one(run.call(*READ_A, block=LOW))
    assert (d.level, d.count) == ("critical", 3)
    run = Run(RECORD_ONLY)
    for _ in range(2):
        run.result("t", {}, error="Unknown tool: q")
    assert one(run.call("t", {}, block={"enabled": True, "unknownToolThreshold": 2})).detector == "unknown_tool_repeat"


def test_rule_13_3_result_of_blocked_call_is_veto_whatever_payload():
    run = blocked_run()
    d = one(run.call(*READ_A, id="blocked-1"))
    assert d.action == "block"
    assert run.result(*READ_A, result=text_result("something new"), id="blocked-1") == []
    d2 = one(run.call(*READ_A))  # had the result been recorded, the streak would be 1 (no block)
    assert (d2.level, d2.count) == ("critical", 20)


def test_rule_13_3_veto_error_payload_also_ignored():
    run = blocked_run()
    one(run.call(*READ_A, id="blocked-2"))
    assert run.result(*READ_A, error="Unknown tool: read", id="blocked-2") == []
    assert one(run.call(*READ_A)).count == 20


def test_rule_13_5_ts_not_used():
    run = Run(ON)
    for i in range(10):
        run.call(*READ_A, ts=1700000000.0 + i)
    assert one(run.call(*READ_A, ts=1.5)).count == 10


def test_step_returns_state_none_on_run_end():
    res = step(None, event("run_end", agent_id="a"), cfg(ON))
    assert res.state is None and list(res.detections) == []


# ---------------------------------------------------------------- more edges


def test_rule_9_4_1_raw_run_id_prefix_means_separate_buckets_within_one_run():
    events = [ev("tool_call", " r1 ", tool_name="read") for _ in range(10)]
    events.append(ev("tool_call", "r1", tool_name="read"))  # count 10, key "r1:..."
    events.append(ev("tool_call", " r1 ", tool_name="read"))  # count 11, key " r1 :...": its bucket is still 0
    events.append(ev("tool_call", "r1", tool_name="read"))  # count 12, bucket 1 already stored for "r1:..."
    rows = rows_for(events)
    assert [(r["event_index"], r["count"], r["emitted"]) for r in rows] == [
        (10, 10, True),
        (11, 11, True),
        (12, 12, False),
    ]


def test_wire_event_id_duplicates_are_per_run():
    events = []
    for i in range(10):
        events.append(ev("tool_call", "r1", tool_name="read", event_id=f"e{i}"))
        events.append(ev("tool_call", "r2", tool_name="read", event_id=f"e{i}"))  # same ids, other run: not duplicates
    events.append(ev("tool_call", "r1", tool_name="read", event_id="e10"))
    events.append(ev("tool_call", "r2", tool_name="read", event_id="e10"))
    rows = rows_for(events)
    assert [(r["run_id"], r["count"]) for r in rows] == [("r1", 10), ("r2", 10)]


def test_wire_duplicate_event_id_dropped_within_the_documented_window():
    # wire.md: "a repeated event_id within a run is a duplicate delivery and is dropped". loopwarden
    # remembers the last MAX_SEEN_EVENT_IDS ids of a run (README: "Duplicate deliveries"); crash
    # redelivery in the worker is caught by offsets, not ids.
    from loopwarden.detection.state import MAX_SEEN_EVENT_IDS

    run = Run(RECORD_ONLY)
    run.arm()
    first = event(
        "tool_result",
        agent_id="agent-1",
        run_id="run-1",
        tool_name="read",
        params={"path": "a.txt"},
        result=SAME,
        event_id="first",
    )
    run.feed(first)
    for i in range(MAX_SEEN_EVENT_IDS - 1):
        run.feed(
            event(
                "tool_call", agent_id="agent-1", run_id="run-1", tool_name="ls", params={"i": i}, event_id=f"filler-{i}"
            )
        )
    run.arm()
    run.feed(first)  # redelivered: must be dropped
    run.feed(first)
    X(run)
    # had the two redeliveries been applied, the guard would have aborted on the X above
    assert X(run) == []
    assert one(X(run)).count == 3


def test_rule_9_1_tool_name_trim_is_javascript_trim():
    run = Run(ON)
    for _ in range(5):
        run.call("\ufeffread\u00a0", {})  # JS trim removes BOM and NBSP
        run.call("read", {})
    d = one(run.call("\u3000READ", {}))
    assert (d.tool_name, d.count) == ("read", 10)


def test_rule_9_1_tool_name_trim_keeps_what_javascript_keeps():
    run = Run(ON)
    for _ in range(10):
        run.call("read", {})
    d = one(run.call("read", {}))
    assert d.tool_name == "read"
    # U+001F and U+0085 are not JavaScript whitespace: "\x1fread" is a different tool from "read"
    assert run.call("\x1fread", {}) == []
    assert run.call("read\x85", {}) == []


def test_rule_6_5_run_id_trim_is_javascript_trim():
    # "\ufeffr1\u00a0" trims to "r1" (same run); "r1\x85" does not (U+0085 is not JS whitespace)
    events = [ev("tool_call", "r1", tool_name="read") for _ in range(5)]
    events += [ev("tool_call", "\ufeffr1\u00a0", tool_name="read") for _ in range(5)]
    events.append(ev("tool_call", "r1", tool_name="read"))  # 10 previous calls in run r1
    events.append(ev("tool_call", "r1\x85", tool_name="read"))  # a different run: fresh history
    rows = rows_for(events)
    assert [(r["event_index"], r["count"]) for r in rows] == [(10, 10)]


# ---------------------------------------------------------------- named coverage for the remaining rules


def test_rule_0_1_loop_veto_does_not_reset_a_streak():
    run = Run(RECORD_ONLY)
    for _ in range(3):
        run.pair(*READ_A, result=SAME)
    veto = {
        "content": [{"type": "text", "text": "blocked"}],
        "details": {"status": "blocked", "deniedReason": "tool-loop", "reason": "blocked"},
    }
    run.pair(*READ_A, result=veto)  # its call stays pending; the veto is not an outcome
    d = one(run.call(*READ_A, block=LOW))
    assert (d.level, d.count, d.warning_key) == ("critical", 3, f"generic:read:{S_READ_A}:{H_SAME}")


def test_rule_6_1_record_keeps_call_id_and_unknown_name():
    run = Run(RECORD_ONLY)
    run.call("x", {}, id="k1")
    run.call("x", {}, id="k2")
    run.result("x", {}, error="Unknown tool: gone", id="k2")  # fills k2 (the newest)
    run.result("x", {}, error="Unknown tool: gone", id="k1")  # fills k1: both records now carry the name
    d = one(run.call("x", {}, block={"enabled": True, "unknownToolThreshold": 2}))
    assert (d.count, d.warning_key) == (2, "unknown-tool:x:gone")


def test_rule_9_4_6_warned_call_still_runs_and_is_recorded():
    run = Run({"enabled": True, "warningThreshold": 2, "criticalThreshold": 5})
    run.pair(*READ_A, result=SAME)
    run.pair(*READ_A, result=SAME)
    assert one(run.pair(*READ_A, result=SAME)).count == 2  # warned, executed, recorded
    assert one(run.pair(*READ_A, result=SAME)).count == 3


def test_rule_11_2_outcome_matching_only_in_the_current_run():
    events = [
        ev("tool_call", "r1", tool_name="t", tool_call_id="c1"),
        ev("tool_result", "r2", tool_name="t", tool_call_id="c1", error="Unknown tool: gone"),  # orphan in r2
        ev("tool_call", "r2", tool_name="t", tool_call_id="c2"),
        ev("tool_call", "r1", tool_name="t", tool_call_id="c3"),
    ]
    fleet = FleetConfig({"enabled": True, "unknownToolThreshold": 1})
    rows = rows_for(events, fleet)
    # r2 sees the orphan failure; r1's newest record (c1) is still pending
    assert [(r["event_index"], r["run_id"], r["detector"]) for r in rows] == [(2, "r2", "unknown_tool_repeat")]


def test_rule_11_4_guard_belongs_to_the_run():
    events = [
        ev("compaction_retry", "r1"),
        ev("tool_result", "r2", tool_name="read", result="x"),
        ev("tool_result", "r2", tool_name="read", result="x"),
        ev("tool_result", "r2", tool_name="read", result="x"),  # r2 was never armed
    ]
    assert rows_for(events, FleetConfig()) == []


def test_rule_12_10_guard_window_size_honoured():
    run = Run({"postCompactionGuard": {"windowSize": 4}})
    run.arm()
    assert X(run) + X(run) + X(run) == []
    assert one(X(run)).message == msg_compaction("read", 4, 4)


def test_rule_13_4_js_numbers_make_equal_signatures():
    run = Run(ON)
    raw = (
        '{"type":"tool_call","agent_id":"agent-1","run_id":"run-1","tool_name":"read",'
        '"params":{"path":"a.txt","limit":%s,"offset":%s}}'
    )
    variants = [("50", "0"), ("50.0", "-0"), ("5e1", "0.0"), ("500e-1", "-0.0"), ("50.00", "0e5")]
    from loopwarden.schemas.events import decode_event

    for limit, offset in variants * 2:
        run.feed(decode_event(raw % (limit, offset)))
    d = one(run.feed(decode_event(raw % ("50", "0"))))
    assert d.count == 10
    assert d.warning_key == "generic:read:" + sig("read", '{"limit":50,"offset":0,"path":"a.txt"}')


def test_rule_3_1_large_payloads_hash_like_small_ones():
    big = "x" * 6000
    run = Run({"enabled": True, "warningThreshold": 1, "criticalThreshold": 2, "globalCircuitBreakerThreshold": 3})
    run.pair("write", {"content": big}, result=text_result(big))
    run.pair("write", {"content": big}, result=text_result(big))
    d = one(run.call("write", {"content": big}))
    s = sig("write", '{"content":"%s"}' % big)
    assert d.warning_key == f"generic:write:{s}:{text_hash(big)}"


def test_rule_0_2_guard_and_overlay_from_the_r1_snapshot():
    # R1's resolver merges postCompactionGuard key by key and its guard honours windowSize
    fleet = FleetConfig({"postCompactionGuard": {"windowSize": 2}}, {"a": {"postCompactionGuard": {"other": 1}}})
    assert fleet.resolve("a").guard_window == 2
    run = Run({"postCompactionGuard": {"windowSize": 2}})
    run.arm()
    assert X(run) == []
    assert one(X(run)).count == 2


def test_rule_0_3_r1_behaviour_not_older_or_newer_revisions():
    # generic_repeat blocks (58db2f91 only warned)
    run = Run(LOW)
    for _ in range(3):
        run.pair(*READ_A, result=SAME)
    assert one(run.call(*READ_A)).level == "critical"
    # the unknown-tool detector exists (absent in 58db2f91)
    run = Run({"enabled": True, "unknownToolThreshold": 1})
    run.pair("t", {}, error="Unknown tool: nope")
    assert one(run.call("t", {})).detector == "unknown_tool_repeat"
    # knobs are honoured (ignored by 2cd06f49 / 00655306 / 0410b692): warning at count 2, not 10
    run = Run({"enabled": True, "warningThreshold": 2})
    run.call(*READ_A)
    run.call(*READ_A)
    assert one(run.call(*READ_A)).count == 2
    # a running exec is hashed from status + tail, not from masked text (58db2f91)
    run = Run(LOW)
    for i in range(3):
        run.pair(
            "exec",
            {"command": "srv"},
            result={
                "content": [{"type": "text", "text": f"session {i} pid {i}"}],
                "details": {"status": "running", "tail": "listening"},
            },
        )
    assert one(run.call("exec", {"command": "srv"})).level == "critical"


def test_rule_6_3_empty_call_id_on_outcome_matches_any_pending_record():
    unk1 = {"enabled": True, "unknownToolThreshold": 1}
    run = Run(RECORD_ONLY)
    run.call("x", {}, id="c1")
    run.call("x", {}, id="c2")
    run.result("x", {}, error="Unknown tool: gone", tool_call_id="")  # empty: like no id -> newest pending (c2)
    assert one(run.call("x", {}, block=unk1)).count == 1


def test_wire_await_decision_does_not_change_detection_or_replay_rows():
    events = [ev("tool_call", "r1", tool_name="read", await_decision=True) for _ in range(11)]
    rows = rows_for(events)
    assert [(r["event_index"], r["count"], r["action"]) for r in rows] == [(10, 10, "warn")]


def test_rule_10_3_identical_error_outcomes_are_identical_triples():
    run = Run(RECORD_ONLY)
    run.arm()
    assert run.pair(*READ_A, error="ENOENT") == []
    assert run.pair(*READ_A, error="ENOENT") == []
    d = one(run.pair(*READ_A, error="ENOENT"))
    assert (d.detector, d.count) == ("compaction_loop_persisted", 3)
    run = Run(RECORD_ONLY)
    run.arm()
    assert (
        run.pair(*READ_A, error="ENOENT") + run.pair(*READ_A, error="EACCES") + run.pair(*READ_A, error="ENOENT") == []
    )
