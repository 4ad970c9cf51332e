"""Spec §7 (streaks) and §8 (decision table, templates, keys) through ``step()``.

Histories are usually built with detection off but recording on (``enabled``
missing, §9.5/§9.6) and then probed with one call under the config of interest,
so every count below is worked out from the spec on a known window.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.helpers import (
    LOW,
    ON,
    Run,
    msg_generic_critical,
    msg_generic_warning,
    msg_global,
    msg_poll_critical,
    msg_poll_warning,
    msg_pp_critical,
    msg_pp_warning,
    msg_unknown,
    sha,
    sig,
    text_hash,
    text_result,
)

RECORD_ONLY = {}  # enabled missing: no detection, calls still recorded

READ_A = ("read", {"path": "a.txt"})
S_READ_A = sig("read", '{"path":"a.txt"}')
READ_B = ("read", {"path": "b.txt"})
S_READ_B = sig("read", '{"path":"b.txt"}')
GREP = ("grep", {"pattern": "TODO"})
S_GREP = sig("grep", '{"pattern":"TODO"}')
POLL = ("command_status", {"commandId": "cmd-1"})
S_POLL = sig("command_status", '{"commandId":"cmd-1"}')
SAME = text_result("same")
H_SAME = text_hash("same")


def one(dets):
    assert len(dets) == 1, dets
    return dets[0]


def pair_key(s1, s2):
    a, b = sorted([s1, s2])
    return f"pingpong:{a}|{b}"


# ---------------------------------------------------------------- §8.2 off by one, rows 7/8 with defaults


def test_rule_8_2_first_warning_on_11th_call_block_on_21st():
    run = Run(ON)
    for i in range(1, 11):
        assert run.pair(*READ_A, result=SAME) == [], i
    d = one(run.pair(*READ_A, result=SAME))  # 11th call: 10 previous identical calls
    assert (d.level, d.detector, d.count, d.action, d.emitted) == ("warning", "generic_repeat", 10, "warn", True)
    assert d.warning_key == f"generic:read:{S_READ_A}"
    assert d.tool_name == "read"
    assert d.message == msg_generic_warning("read", 10)
    for n in range(11, 20):  # calls 12..20
        d = one(run.pair(*READ_A, result=SAME))
        assert (d.detector, d.count, d.emitted) == ("generic_repeat", n, False)
    d = one(run.pair(*READ_A, result=SAME))  # 21st call: 20 identical outcomes
    assert (d.level, d.detector, d.count, d.action, d.emitted) == ("critical", "generic_repeat", 20, "block", True)
    assert d.warning_key == f"generic:read:{S_READ_A}:{H_SAME}"
    assert d.message == msg_generic_critical("read", 20)


def test_rule_8_2_warning_key_format_example():
    run = Run(ON)
    for _ in range(10):
        run.call("read", {})
    d = one(run.call("read", {}))
    assert d.warning_key == "generic:read:read:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"


def test_rule_8_3_generic_warnings_need_no_evidence_blocks_do():
    run = Run(ON)
    for _ in range(10):
        assert run.call(*READ_A) == []
    for n in range(10, 30):
        d = one(run.call(*READ_A))  # never a result: pending records only
        assert (d.level, d.detector, d.count) == ("warning", "generic_repeat", n)
    d = one(run.call(*READ_A))
    assert (d.level, d.count) == ("warning", 30)  # saturates at historySize


# ---------------------------------------------------------------- row 1


def test_rule_8_row1_unknown_tool_repeat():
    run = Run({"enabled": True, "unknownToolThreshold": 3})
    for i in range(3):  # arguments are irrelevant (§7.1)
        assert run.pair("browser", {"url": f"https://x/{i}"}, error="Unknown tool: browser_navigate") == []
    d = one(run.call("browser", {"url": "https://x/9"}))
    assert (d.level, d.detector, d.count, d.action) == ("critical", "unknown_tool_repeat", 3, "block")
    assert d.warning_key == "unknown-tool:browser:browser_navigate"
    assert d.message == msg_unknown("browser_navigate", 3)
    assert d.tool_name == "browser"


def test_rule_8_row1_wins_over_global_and_generic():
    run = Run(RECORD_ONLY)
    for _ in range(4):
        run.pair("jira", {"q": "x"}, error="Tool jira_search not found")
    probe = {
        "enabled": True,
        "unknownToolThreshold": 4,
        "warningThreshold": 2,
        "criticalThreshold": 3,
        "globalCircuitBreakerThreshold": 4,
    }
    d = one(run.call("jira", {"q": "x"}, block=probe))
    assert (d.detector, d.count, d.warning_key) == ("unknown_tool_repeat", 4, "unknown-tool:jira:jira_search")


def test_rule_7_1_unknown_streak_independent_of_detector_switches():
    run = Run(RECORD_ONLY)
    for _ in range(2):
        run.pair("t", {}, error="Unknown tool: zz")
    off = {
        "enabled": True,
        "unknownToolThreshold": 2,
        "detectors": {"genericRepeat": False, "knownPollNoProgress": False, "pingPong": False},
    }
    assert one(run.call("t", {}, block=off)).detector == "unknown_tool_repeat"


# ---------------------------------------------------------------- §7.1 unknown-tool streak


def unknown_probe(history, probe_tool="browser"):
    run = Run(RECORD_ONLY)
    for item in history:
        item(run)
    return run.call(probe_tool, {"url": "probe"}, block={"enabled": True, "unknownToolThreshold": 3})


def U(name="foo", tool="browser"):
    return lambda run: run.pair(tool, {"url": name}, error=f"Unknown tool: {name}")


def test_rule_7_1_consecutive_same_name_counts():
    d = one(unknown_probe([U(), U(), U()]))
    assert (d.detector, d.count, d.warning_key) == ("unknown_tool_repeat", 3, "unknown-tool:browser:foo")


def test_rule_7_1_different_unknown_name_stops_walk():
    assert unknown_probe([U("bar"), U(), U()]) == []
    d = one(unknown_probe([U("bar"), U(), U(), U()]))
    assert d.count == 3


@pytest.mark.parametrize(
    "breaker",
    [
        lambda run: run.pair("read", {"path": "x"}, result="ok"),  # another tool's record
        lambda run: run.pair("browser", {"url": "ok"}, result="fine"),  # success of the same tool
        lambda run: run.pair("browser", {"url": "t"}, error="Tool execution failed: timeout"),  # ordinary error
        lambda run: run.call("browser", {"url": "pending"}),  # pending call
    ],
    ids=["other-tool", "success", "ordinary-error", "pending"],
)
def test_rule_7_1_other_records_stop_the_walk(breaker):
    assert unknown_probe([U(), U(), breaker, U(), U()]) == []
    assert unknown_probe([U(), U(), U(), breaker]) == []


def test_rule_7_1_probe_with_other_tool_name_sees_no_streak():
    assert unknown_probe([U(), U(), U(), U()], probe_tool="browser2") == []


# ---------------------------------------------------------------- rows 2-4 (known poll, global)


def build(pairs, n, result=SAME):
    run = Run(RECORD_ONLY)
    for _ in range(n):
        run.pair(*pairs, result=result)
    return run


def test_rule_8_row2_global_before_known_poll_critical():
    d = one(build(POLL, 4).call(*POLL, block=LOW))
    assert (d.level, d.detector, d.count, d.action) == ("critical", "global_circuit_breaker", 4, "block")
    assert d.warning_key == f"global:command_status:{S_POLL}:{H_SAME}"
    assert d.message == msg_global("command_status", 4)


def test_rule_8_row3_known_poll_critical():
    d = one(build(POLL, 3).call(*POLL, block=LOW))
    assert (d.level, d.detector, d.count, d.action) == ("critical", "known_poll_no_progress", 3, "block")
    assert d.warning_key == f"poll:command_status:{S_POLL}:{H_SAME}"
    assert d.message == msg_poll_critical("command_status", 3)


def test_rule_8_row4_known_poll_warning():
    d = one(build(POLL, 2).call(*POLL, block=LOW))
    assert (d.level, d.detector, d.count, d.action, d.emitted) == (
        "warning",
        "known_poll_no_progress",
        2,
        "warn",
        False,
    )
    assert d.warning_key == f"poll:command_status:{S_POLL}:{H_SAME}"
    assert d.message == msg_poll_warning("command_status", 2)


def test_rule_8_row4_known_poll_defaults_emitted_at_ten():
    d = one(build(POLL, 10).call(*POLL, block=ON))
    assert (d.detector, d.count, d.emitted) == ("known_poll_no_progress", 10, True)


def test_rule_8_row4_before_ping_pong_critical():
    run = Run(RECORD_ONLY)
    for _ in range(3):
        run.pair(*POLL, result=SAME)
        run.pair(*READ_A, result=SAME)
    cfg = {"enabled": True, "warningThreshold": 2, "criticalThreshold": 4, "globalCircuitBreakerThreshold": 5}
    d = one(run.call(*POLL, block=cfg))  # no-progress 3 (row 4); ping-pong count 7 with evidence (row 5)
    assert (d.level, d.detector, d.count) == ("warning", "known_poll_no_progress", 3)


@pytest.mark.parametrize("params", [{"action": "poll", "sessionId": "s"}, {"action": "log", "sessionId": "s"}])
def test_rule_7_5_process_poll_and_log_are_known_polls(params):
    res = {"details": {"status": "running"}, "content": [{"type": "text", "text": "..."}]}
    run = build(("process", params), 3, result=res)
    d = one(run.call("process", params, block=LOW))
    assert (d.detector, d.count) == ("known_poll_no_progress", 3)
    assert d.warning_key.startswith("poll:process:process:")


@pytest.mark.parametrize("params", [{"action": "kill", "sessionId": "s"}, {"action": "Poll"}, {}])
def test_rule_7_5_other_process_actions_are_not_polls(params):
    run = build(("process", params), 3)
    assert one(run.call("process", params, block=LOW)).detector == "generic_repeat"


def test_rule_7_5_command_status_any_params():
    run = build(("command_status", {"anything": [1, 2]}), 3)
    assert one(run.call("command_status", {"anything": [1, 2]}, block=LOW)).detector == "known_poll_no_progress"
    run = build(("command_status", {}), 2)
    assert one(run.call("command_status", {}, block=LOW)).detector == "known_poll_no_progress"


def test_rule_8_3_known_poll_never_generic_even_when_results_change():
    run = Run(ON)
    for i in range(25):
        assert run.pair(*POLL, result=text_result(f"progress {i}%")) == [], i


def test_rule_8_3_pending_polls_never_warn():
    run = Run(ON)
    for i in range(25):
        assert run.call("process", {"action": "poll", "sessionId": "s"}) == [], i


def test_rule_8_3_non_poll_never_known_poll_detector():
    run = build(READ_A, 3)
    d = one(run.call(*READ_A, block=LOW))
    assert (d.detector, d.level, d.count) == ("generic_repeat", "critical", 3)


# ---------------------------------------------------------------- §8.4 global breaker when a detector is off


def test_rule_8_4_global_breaker_when_generic_off():
    cfg = dict(LOW, detectors={"genericRepeat": False})
    assert build(READ_A, 3).call(*READ_A, block=cfg) == []
    d = one(build(READ_A, 4).call(*READ_A, block=cfg))
    assert (d.detector, d.count, d.warning_key) == ("global_circuit_breaker", 4, f"global:read:{S_READ_A}:{H_SAME}")


def test_rule_8_4_global_breaker_when_known_poll_off():
    cfg = dict(LOW, detectors={"knownPollNoProgress": False})
    assert build(POLL, 3).call(*POLL, block=cfg) == []  # and no generic for a known poll
    d = one(build(POLL, 4).call(*POLL, block=cfg))
    assert (d.detector, d.count) == ("global_circuit_breaker", 4)


def test_rule_8_4_global_breaker_defaults_at_thirty():
    run = build(POLL, 30)
    d = one(run.call(*POLL, block={"enabled": True, "detectors": {"knownPollNoProgress": False}}))
    assert (d.detector, d.count, d.message) == ("global_circuit_breaker", 30, msg_global("command_status", 30))
    run = build(POLL, 29)
    assert run.call(*POLL, block={"enabled": True, "detectors": {"knownPollNoProgress": False}}) == []


# ---------------------------------------------------------------- §7.2 no-progress streak


NOPP = {
    "enabled": True,
    "warningThreshold": 2,
    "criticalThreshold": 3,
    "globalCircuitBreakerThreshold": 10,
    "detectors": {"pingPong": False},
}


def test_rule_7_2_other_signatures_are_skipped():
    run = Run(RECORD_ONLY)
    for i in range(3):
        run.pair(*READ_A, result=SAME)
        run.pair("read", {"path": f"other-{i}"}, result=text_result(f"x{i}"))
    d = one(run.call(*READ_A, block=NOPP))
    assert (d.level, d.detector, d.count) == ("critical", "generic_repeat", 3)


def test_rule_7_2_pending_records_are_skipped():
    run = build(READ_A, 3)
    run.call(*READ_A)  # pending
    d = one(run.call(*READ_A, block=NOPP))
    assert (d.level, d.count) == ("critical", 3)


def test_rule_7_2_streak_ends_at_first_different_hash():
    run = Run(RECORD_ONLY)
    run.pair(*READ_A, result=text_result("h1"))
    run.pair(*READ_A, result=text_result("h2"))
    run.pair(*READ_A, result=text_result("h2"))
    d = one(run.call(*READ_A, block=NOPP))  # streak 2 < 3 -> row 8 with recent count 3
    assert (d.level, d.detector, d.count, d.warning_key) == ("warning", "generic_repeat", 3, f"generic:read:{S_READ_A}")


def test_rule_7_2_streak_counts_since_last_change_and_reports_latest_hash():
    run = Run(RECORD_ONLY)
    for text in ("h2", "h1", "h2", "h2", "h2"):
        run.pair(*READ_A, result=text_result(text))
    d = one(run.call(*READ_A, block=NOPP))
    assert (d.level, d.count, d.warning_key) == ("critical", 3, f"generic:read:{S_READ_A}:{text_hash('h2')}")


def test_rule_7_2_streak_never_exceeds_history_size():
    run = Run({"historySize": 5})
    for _ in range(10):
        run.pair(*READ_A, result=SAME)
    cfg = {
        "enabled": True,
        "historySize": 5,
        "warningThreshold": 2,
        "criticalThreshold": 3,
        "globalCircuitBreakerThreshold": 6,
    }
    d = one(run.call(*READ_A, block=cfg))
    assert (d.detector, d.count) == ("generic_repeat", 5)


# ---------------------------------------------------------------- §7.3 recent count


def test_rule_7_3_recent_count_includes_pending_and_saturates():
    run = Run({"historySize": 5})
    for _ in range(8):
        run.call(*READ_A)
    d = one(run.call(*READ_A, block={"enabled": True, "historySize": 5, "warningThreshold": 2}))
    assert (d.detector, d.level, d.count) == ("generic_repeat", "warning", 5)


def test_rule_7_3_recent_count_only_same_tool_and_args():
    run = Run(RECORD_ONLY)
    run.call(*READ_A)
    run.call(*READ_B)
    run.call("write", {"path": "a.txt"})
    run.call(*READ_A)
    d = one(run.call(*READ_A, block={"enabled": True, "warningThreshold": 2, "detectors": {"pingPong": False}}))
    assert d.count == 2


# ---------------------------------------------------------------- §7.4 ping-pong, rows 5/6


def alternate(run, sides, n, results=None):
    """Record n calls alternating between sides[0], sides[1], ... with identical per-side results."""
    for i in range(n):
        tool, params = sides[i % len(sides)]
        res = results[i] if results else text_result(f"{tool}-result")
        run.pair(tool, params, result=res)


def test_rule_7_4_ping_pong_count_is_tail_plus_one():
    run = Run(RECORD_ONLY)
    run.pair("read", {"path": "x"}, result="x")
    alternate(run, [READ_A, GREP], 4)  # X, A, G, A, G  (newest G)
    d = one(run.call(*READ_A, block={"enabled": True, "warningThreshold": 2, "criticalThreshold": 10}))
    assert (d.level, d.detector, d.count, d.action) == ("warning", "ping_pong", 5, "warn")
    assert d.message == msg_pp_warning(5)
    assert d.paired_tool_name == "grep"  # tool of the newest record
    assert d.tool_name == "read"
    assert d.warning_key == pair_key(S_READ_A, S_GREP) == f"pingpong:{S_GREP}|{S_READ_A}"


def test_rule_7_4_2_a_blank_name_on_the_other_side_gives_nothing():
    """OpenClaw's ``!otherToolName``: a whitespace-only name normalizes to ``""`` and is no B side; the named
    side still counts, paired with ``""`` (issue 42's reproducer, ``tests/data/blank_name.jsonl``)."""
    cfg = {"enabled": True, "warningThreshold": 3}
    run = Run(cfg)
    assert run.call("read", {}) == [] and run.call(" ", {}) == []
    d = one(run.call("read", {}))
    assert (d.detector, d.count, d.tool_name, d.paired_tool_name) == ("ping_pong", 3, "read", "")
    assert run.call(" ", {}) == []  # would be count 4, paired read


def test_rule_7_4_pair_key_same_from_both_sides():
    cfg = {"enabled": True, "warningThreshold": 2, "criticalThreshold": 10}
    r1 = Run(RECORD_ONLY)
    alternate(r1, [READ_A, GREP], 4)  # newest GREP, probe READ_A
    r2 = Run(RECORD_ONLY)
    alternate(r2, [GREP, READ_A], 4)  # newest READ_A, probe GREP
    d1, d2 = one(r1.call(*READ_A, block=cfg)), one(r2.call(*GREP, block=cfg))
    assert d1.warning_key == d2.warning_key == f"pingpong:{S_GREP}|{S_READ_A}"
    assert (d1.paired_tool_name, d2.paired_tool_name) == ("grep", "read")


def test_rule_7_4_current_call_must_be_the_other_signature():
    cfg = {"enabled": True, "warningThreshold": 2, "criticalThreshold": 10}
    run = Run(RECORD_ONLY)
    alternate(run, [READ_A, GREP], 4)  # A G A G
    assert run.call("write", {"path": "new"}, block=cfg) == []  # a third signature
    run = Run(RECORD_ONLY)
    alternate(run, [READ_A, GREP], 4)
    d = one(run.call(*GREP, block=cfg))  # the newest signature again: no ping-pong, generic instead
    assert (d.detector, d.count) == ("generic_repeat", 2)


def test_rule_7_4_tail_shorter_than_two_gives_nothing():
    run = Run(RECORD_ONLY)
    run.pair(*READ_A, result="a")
    run.pair(*GREP, result="g")
    run.pair(*GREP, result="g")  # A G G: tail k=1
    assert run.call(*READ_A, block={"enabled": True, "warningThreshold": 2, "criticalThreshold": 10}) == []


def test_rule_7_4_no_other_signature_gives_nothing():
    run = Run(RECORD_ONLY)
    for _ in range(3):
        run.call(*READ_A)
    d = one(run.call(*READ_A, block={"enabled": True, "warningThreshold": 2, "criticalThreshold": 10}))
    assert d.detector == "generic_repeat"


def test_rule_8_row5_ping_pong_critical_before_generic_critical():
    run = Run(RECORD_ONLY)
    alternate(run, [GREP, READ_A], 6)  # G A G A G A (newest A), identical results per side
    d = one(run.call(*GREP, block=LOW))  # grep no-progress 3 would also satisfy row 7
    assert (d.level, d.detector, d.count, d.action) == ("critical", "ping_pong", 7, "block")
    assert d.message == msg_pp_critical(7)
    assert d.paired_tool_name == "read"
    assert d.warning_key == f"pingpong:{S_GREP}|{S_READ_A}"


def test_rule_8_row6_ping_pong_warning_without_evidence_precedes_generic_critical():
    run = Run(RECORD_ONLY)
    results = [text_result("g") if i % 2 == 0 else text_result(f"a{i}") for i in range(6)]
    alternate(run, [GREP, READ_A], 6, results)  # read side keeps changing: no evidence
    d = one(run.call(*GREP, block=LOW))
    assert (d.level, d.detector, d.count) == ("warning", "ping_pong", 7)


def test_rule_7_4_6_pending_tail_record_breaks_evidence():
    run = Run(RECORD_ONLY)
    alternate(run, [READ_A, GREP], 4)  # A G A G
    run.call(*READ_A)  # newest A pending
    d = one(run.call(*GREP, block=LOW))
    assert (d.level, d.detector, d.count) == ("warning", "ping_pong", 6)


def test_rule_7_4_6_evidence_needs_one_hash_per_side():
    run = Run(RECORD_ONLY)
    results = [text_result("a"), text_result("g1"), text_result("a"), text_result("g2")]
    alternate(run, [READ_A, GREP], 4, results)  # A G A G, grep side changed
    d = one(run.call(*READ_A, block=LOW))
    assert (d.level, d.detector, d.count) == ("warning", "ping_pong", 5)
    run = Run(RECORD_ONLY)
    alternate(run, [READ_A, GREP], 4)
    d = one(run.call(*READ_A, block=LOW))
    assert (d.level, d.detector, d.count) == ("critical", "ping_pong", 5)


def test_rule_7_4_7_count_saturates_at_history_size_plus_one():
    run = Run({"historySize": 6})
    alternate(run, [READ_A, GREP], 20)  # newest GREP
    d = one(
        run.call(*READ_A, block={"enabled": True, "historySize": 6, "warningThreshold": 2, "criticalThreshold": 10})
    )
    assert (d.detector, d.count) == ("ping_pong", 7)


def test_rule_8_row7_generic_critical_when_ping_pong_off():
    run = Run(RECORD_ONLY)
    alternate(run, [GREP, READ_A], 6)
    d = one(run.call(*GREP, block=dict(LOW, detectors={"pingPong": False})))
    assert (d.level, d.detector, d.count) == ("critical", "generic_repeat", 3)
    assert d.warning_key == f"generic:grep:{S_GREP}:{text_hash('grep-result')}"
    assert d.paired_tool_name is None


def test_rule_8_5_alternation_falls_back_to_generic_warning_when_ping_pong_off():
    run = Run(RECORD_ONLY)
    results = [text_result(f"r{i}") for i in range(6)]  # all different: never a generic block
    alternate(run, [GREP, READ_A], 6, results)
    d = one(run.call(*GREP, block=dict(LOW, detectors={"pingPong": False})))
    assert (d.level, d.detector, d.count, d.warning_key) == ("warning", "generic_repeat", 3, f"generic:grep:{S_GREP}")


def test_rule_8_5_generic_blocks_only_when_one_side_alone_reaches_critical():
    cfg = {
        "enabled": True,
        "warningThreshold": 2,
        "criticalThreshold": 3,
        "globalCircuitBreakerThreshold": 10,
        "detectors": {"pingPong": False},
    }
    run = Run(RECORD_ONLY)
    alternate(run, [GREP, READ_A], 4)  # grep twice
    assert one(run.call(*GREP, block=cfg)).level == "warning"
    run = Run(RECORD_ONLY)
    alternate(run, [GREP, READ_A], 6)  # grep three times
    assert one(run.call(*GREP, block=cfg)).level == "critical"


# ---------------------------------------------------------------- §8.1 templates all at once


def test_rule_8_1_message_templates_verbatim():
    assert msg_generic_warning("read", 10) == (
        "WARNING: You have called read 10 times with identical arguments. If this is not making progress, stop "
        "retrying and report the task as failed."
    )
    run = build(READ_A, 3)
    assert one(run.call(*READ_A, block=LOW)).message == (
        "CRITICAL: Called read with identical arguments and identical outcomes 3 times. Session execution blocked "
        "to prevent runaway loops."
    )
    run = build(POLL, 2)
    assert one(run.call(*POLL, block=LOW)).message == (
        "WARNING: You have called command_status 2 times with identical arguments and no progress. Stop polling and "
        "either (1) increase wait time between checks, or (2) report the task as failed if the process is stuck."
    )


def test_rule_7_signature_prefix_in_keys():
    run = build(READ_A, 3)
    d = one(run.call(*READ_A, block=LOW))
    assert d.warning_key.startswith("generic:read:read:")
    assert S_READ_A == "read:" + sha('{"path":"a.txt"}')


# ---------------------------------------------------------------- model-based properties (hypothesis)
#
# A literal transcription of §6.2/§6.3 (recording), §7.2-§7.4 (streaks), §8 rows 2 and 5-8 and §9.3/§9.4
# (critical not recorded, bucket emission), run against step() on random traces.


SIDES = [("read", {"p": 0}), ("read", {"p": 1}), ("grep", {"q": 0}), ("command_status", {"id": 0})]
POLL_SIDES = {3}


def outcome_of(res_i):
    """res 0/1: two text results; res 2: an unknown-tool error (name "ghost");
    res 3: an ordinary error; res 4: another unknown name."""
    if res_i == 2:
        return {"error": "Unknown tool: ghost"}, ("err", "ghost"), "ghost"
    if res_i == 3:
        return {"error": "boom"}, ("err", "boom"), None
    if res_i == 4:
        return {"error": "Tool 'Spectre' is not available"}, ("err", "spectre"), "spectre"
    return {"result": text_result(f"r{res_i}")}, ("ok", res_i), None


class Model:
    def __init__(self, hs, w, c, g, u, pp_on, gen_on, kp_on):
        self.h = []  # dicts: tool, sig, res, unk, id
        self.hs, self.w, self.c, self.g, self.u = hs, w, c, g, u
        self.pp_on, self.gen_on, self.kp_on = pp_on, gen_on, kp_on
        self.buckets = {}

    def trim(self):
        del self.h[: max(0, len(self.h) - self.hs)]

    def decide(self, tool, sig):
        H = self.h
        # 7.1
        unk_n, unk_name = 0, None
        for r in reversed(H):
            if r["tool"] != tool or r["unk"] is None:
                break
            if unk_name is None:
                unk_name, unk_n = r["unk"], 1
            elif r["unk"] == unk_name:
                unk_n += 1
            else:
                break
        # 7.2
        streak, latest = 0, None
        for r in reversed(H):
            if r["sig"] != sig or r["res"] is None:
                continue
            if latest is None:
                latest, streak = r["res"], 1
            elif r["res"] == latest:
                streak += 1
            else:
                break
        # 7.3
        recent = sum(1 for r in H if r["sig"] == sig)
        # 7.4
        pp, paired, evidence, key = 0, None, False, None
        if H:
            a = H[-1]["sig"]
            b = next((r["sig"] for r in reversed(H) if r["sig"] != a), None)
            if b is not None:
                k = 0
                for i, r in enumerate(reversed(H)):
                    if r["sig"] != (a if i % 2 == 0 else b):
                        break
                    k += 1
                if k >= 2 and sig == b:
                    pp, paired = k + 1, H[-1]["tool"]
                    tail = H[-k:]
                    evidence = (
                        all(r["res"] is not None for r in tail)
                        and len({r["res"] for r in tail if r["sig"] == a}) == 1
                        and len({r["res"] for r in tail if r["sig"] == b}) == 1
                    )
                    key = ("pp",) + tuple(sorted([repr(a), repr(b)]))
        poll = sig in POLL_SIDES  # 7.5
        # §8
        if unk_n >= self.u:
            return ("critical", "unknown_tool_repeat", unk_n, None, None)
        if streak >= self.g:
            return ("critical", "global_circuit_breaker", streak, None, None)
        if poll and self.kp_on and streak >= self.c:
            return ("critical", "known_poll_no_progress", streak, None, None)
        if poll and self.kp_on and streak >= self.w:
            return ("warning", "known_poll_no_progress", streak, None, ("poll", sig, latest))
        if self.pp_on and pp >= self.c and evidence:
            return ("critical", "ping_pong", pp, paired, key)
        if self.pp_on and pp >= self.w:
            return ("warning", "ping_pong", pp, paired, key)
        if not poll and self.gen_on and streak >= self.c:
            return ("critical", "generic_repeat", streak, None, None)
        if not poll and self.gen_on and recent >= self.w:
            return ("warning", "generic_repeat", recent, None, ("generic", sig))
        return None

    def call(self, tool, sig, call_id):
        v = self.decide(tool, sig)
        if v is None:
            out = None
        elif v[0] == "critical":
            return (v[0], v[1], v[2], v[3], True)  # §9.3: not recorded
        else:
            bucket = v[2] // 10  # §9.4
            emitted = bucket > self.buckets.get(v[4], 0)
            if emitted:
                self.buckets[v[4]] = bucket
            out = (v[0], v[1], v[2], v[3], emitted)
        self.h.append({"tool": tool, "sig": sig, "res": None, "unk": None, "id": call_id})  # §6.2
        self.trim()
        return out

    def result(self, tool, sig, res, unk, call_id=None):  # §6.3
        for r in reversed(self.h):
            if r["sig"] == sig and r["res"] is None and (call_id is None or r["id"] == call_id):
                r["res"], r["unk"] = res, unk
                break
        else:
            self.h.append({"tool": tool, "sig": sig, "res": res, "unk": unk, "id": call_id})
        self.trim()


actions = st.lists(
    st.tuples(
        st.sampled_from(["pair", "pair", "call", "orphan"]),
        st.integers(0, 3),
        st.sampled_from([0, 0, 1, 1, 2, 2, 3, 4]),
    ),
    max_size=45,
)


@settings(max_examples=300, deadline=None)
@given(
    actions,
    st.integers(3, 12),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(1, 4),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_property_engine_matches_literal_spec_model(trace, hs, w, dc, dg, u, pp_on, gen_on, kp_on):
    c, g = w + dc, w + dc + dg
    block = {
        "enabled": True,
        "historySize": hs,
        "warningThreshold": w,
        "criticalThreshold": c,
        "globalCircuitBreakerThreshold": g,
        "unknownToolThreshold": u,
        "detectors": {"pingPong": pp_on, "genericRepeat": gen_on, "knownPollNoProgress": kp_on},
    }
    run, model = Run(block), Model(hs, w, c, g, u, pp_on, gen_on, kp_on)
    for n, (kind, side, res_i) in enumerate(trace):
        tool, params = SIDES[side]
        payload, res, unk = outcome_of(res_i)
        if kind == "orphan":
            assert run.result(tool, params, **payload) == []
            model.result(tool, side, res, unk)
            continue
        cid = f"c{n}"
        dets = run.call(tool, params, id=cid)
        got = [(d.level, d.detector, d.count, d.paired_tool_name, d.emitted) for d in dets]
        want = model.call(tool, side, cid)
        assert got == ([want] if want else []), (n, kind, side)
        if kind == "pair":
            # the runner reports the outcome; for a blocked call it is the veto (§13.3): nothing recorded
            assert run.result(tool, params, id=cid, **payload) == []
            if not (want and want[0] == "critical"):
                model.result(tool, side, res, unk, call_id=cid)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=60), st.integers(1, 8))
def test_property_recent_count_matches_window_model(seq, hs):
    run = Run(
        {
            "enabled": True,
            "historySize": hs,
            "warningThreshold": 1,
            "criticalThreshold": 1000,
            "detectors": {"pingPong": False},
        }
    )
    window: list[int] = []
    for k in seq:
        dets = run.call("read", {"k": k})
        n = window.count(k)
        if n:
            d = one(dets)
            assert (d.level, d.detector, d.count) == ("warning", "generic_repeat", n)
        else:
            assert dets == []
        window = (window + [k])[-hs:]
