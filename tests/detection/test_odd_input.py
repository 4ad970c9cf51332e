"""Odd input, OpenClaw's way (project issue 9): one test or more per case.

Every expected digest is the SHA-256 of a canonical string written out here
by hand from RULES.md §2 (``sha``/``sig`` in helpers); events are JSON text as a
runner would send it, with ``\\udXXX`` escapes and number literals that no
Python value prints (``1e400``, 400-digit integers).
"""

from __future__ import annotations

from loopwarden.detection import engine
from loopwarden.detection import state as state_module
from loopwarden.replay import BadLine, replay_lines
from loopwarden.schemas.config import KNOB_CAPS, FleetConfig, _positive_int, load_config, parse_config_text
from loopwarden.schemas.events import decode_event
from tests.support.helpers import LOW, Run, msg_unknown, sha, sig

HUGE_INT = "1" + "0" * 320  # beyond the double range: Infinity in JavaScript
EMPTY = sha("{}")


def ev(text: str):
    return decode_event(text.encode("utf-8"))


def feed(run: Run, text: str):
    return run.feed(ev(text))


def call(tool_json: str, params_json: str, call_id: str | None = None) -> str:
    cid = f',"tool_call_id":"{call_id}"' if call_id else ""
    return f'{{"type":"tool_call","agent_id":"a","run_id":"r","tool_name":{tool_json},"params":{params_json}{cid}}}'


def result(tool_json: str, params_json: str, result_json: str, call_id: str | None = None) -> str:
    cid = f',"tool_call_id":"{call_id}"' if call_id else ""
    return (
        f'{{"type":"tool_result","agent_id":"a","run_id":"r","tool_name":{tool_json},"params":{params_json},'
        f'"result":{result_json}{cid}}}'
    )


# ---------------------------------------------------------------- 1. numbers beyond the double range


def test_1_huge_literals_in_params_hash_as_quoted_infinity():
    run = Run(LOW)
    for literal in ("1e400", HUGE_INT, "1e999"):  # three spellings of Infinity: one signature
        dets = feed(run, call('"read"', '{"bigId":%s}' % literal))
    (det,) = dets
    assert (det.detector, det.count) == ("generic_repeat", 2)
    assert det.warning_key == "generic:read:" + sig("read", '{"bigId":"Infinity"}')


def test_1_negative_overflow_in_results_is_minus_infinity_and_replay_does_not_crash():
    params = '{"bigId":%s}' % HUGE_INT
    lines = []
    for i in range(4):
        lines.append(call('"read"', params, f"c{i}"))
        lines.append(result('"read"', params, "[-%s,1e400]" % HUGE_INT, f"c{i}"))
    rows = [r for r in replay_lines(lines, FleetConfig(LOW))]
    assert not any(isinstance(r, BadLine) for r in rows)
    crit = [r for r in rows if r["level"] == "critical"]
    # pairs 1-3 give 3 identical outcomes; the 4th call is blocked (critical 3)
    assert crit[0]["event_index"] == 6
    assert crit[0]["warning_key"] == (
        "generic:read:" + sig("read", '{"bigId":"Infinity"}') + ":" + sha('["-Infinity","Infinity"]')
    )


# ---------------------------------------------------------------- 2. and 7. such numbers in a config file


def test_2_overflowing_threshold_in_json_config_falls_back_to_default():
    text = '{"agents":{"list":[{"id":"main","tools":{"loopDetection":{"unknownToolThreshold":-1e400}}}]}}'
    config = FleetConfig.from_document(parse_config_text(text))
    assert config.resolve("main").unknown_tool_threshold == 10


def test_2_overflowing_numbers_in_json5_config_file(tmp_path):
    path = tmp_path / "c.json5"
    path.write_text(
        "{\n  // 1e400 in a comment stays a comment\n  tools: { loopDetection: {\n"
        "    enabled: true, warningThreshold: 1e400, criticalThreshold: -1e999,\n"
        "    historySize: 'x1e400', globalCircuitBreakerThreshold: 40,\n  } },\n}\n"
    )
    resolved = load_config(path).resolve("any")
    assert (resolved.warning_threshold, resolved.critical_threshold) == (10, 20)
    assert (resolved.history_size, resolved.global_circuit_breaker_threshold) == (30, 40)
    assert resolved.enabled


def test_7_400_digit_integer_threshold_is_infinity_so_default():
    text = '{"tools":{"loopDetection":{"enabled":true,"warningThreshold":1%s}}}' % ("0" * 400)
    resolved = FleetConfig.from_document(parse_config_text(text)).resolve("a")
    assert (resolved.warning_threshold, resolved.critical_threshold) == (10, 20)
    # A 300-digit integer is finite (1e300 is an integer in JavaScript): it counts, as the cap
    # (RULES.md §1.9: a number above its cap counts as the cap; not the default).
    text = '{"tools":{"loopDetection":{"historySize":1%s}}}' % ("0" * 300)
    assert FleetConfig.from_document(parse_config_text(text)).resolve("a").history_size == KNOB_CAPS["historySize"]
    assert _positive_int(parse_config_text(text)["tools"]["loopDetection"]["historySize"], 30) == int(1e300)


def test_2_lone_surrogate_in_config_strings_is_read():
    text = '{"agents":{"list":[{"id":"b\\ud800ot","tools":{"loopDetection":{"warningThreshold":4}}}]}}'
    config = FleetConfig.from_document(parse_config_text(text))
    assert config.resolve("B\ud800OT").warning_threshold == 4
    assert config.resolve("bot").warning_threshold == 10


# ---------------------------------------------------------------- 3. lone surrogates kept in tool names


def test_3_lone_surrogate_tool_name_is_another_tool():
    run = Run(LOW)
    feed(run, call('"web_fetch"', "{}"))
    feed(run, call('"we\\udc00b_fetch"', "{}"))
    (det,) = feed(run, call('"web_fetch"', "{}"))
    # Stripped, it would be a third identical web_fetch (generic, count 2); as sent it is an A,B,A alternation.
    sig_a, sig_b = "web_fetch:" + EMPTY, "we\udc00b_fetch:" + EMPTY  # "b" (0x62) < U+DC00 in UTF-16
    assert (det.detector, det.count, det.tool_name) == ("ping_pong", 3, "web_fetch")
    assert det.paired_tool_name == "we\udc00b_fetch"
    assert det.warning_key == f"pingpong:{sig_a}|{sig_b}"


# ---------------------------------------------------------------- 4. whitespace-only tool name


def test_4_whitespace_only_tool_name_is_the_empty_name():
    run = Run(LOW)
    for _ in range(3):
        dets = feed(run, call('"  \\u00a0"', "{}"))
    (det,) = dets
    assert det.tool_name == ""
    assert det.warning_key == "generic:" + "" + ":" + (":" + EMPTY)  # generic:<tool>:<argsHash>
    run = Run(LOW)
    for _ in range(3):
        dets = feed(run, call('""', "{}"))
    assert dets[0].tool_name == "tool"  # empty: the default applies


# ---------------------------------------------------------------- 5. agents.list entry without id


def test_5_entry_without_id_applies_to_main():
    for entry in ({}, {"id": None}, {"id": "   "}, {"id": ""}):
        doc = {"agents": {"list": [{**entry, "tools": {"loopDetection": {"warningThreshold": 3}}}]}}
        config = FleetConfig.from_document(doc)
        assert config.resolve("main").warning_threshold == 3, entry
        assert config.resolve(" MAIN ").warning_threshold == 3
        assert config.resolve("other").warning_threshold == 10


def test_5_first_matching_entry_wins_and_ids_are_trimmed_and_lowercased():
    doc = {
        "agents": {
            "list": [
                {"id": " Main ", "tools": {"loopDetection": {"warningThreshold": 4}}},
                {"tools": {"loopDetection": {"warningThreshold": 5}}},
                {"id": "\u00a0Research-Bot\u2028", "tools": {"loopDetection": {"warningThreshold": 6}}},
            ]
        }
    }
    config = FleetConfig.from_document(doc)
    assert config.resolve("main").warning_threshold == 4
    assert config.resolve("research-bot").warning_threshold == 6


# ---------------------------------------------------------------- 6. strings the rules look at


def test_6_process_action_with_lone_surrogate_is_not_poll():
    run = Run(LOW)
    params = '{"action":"po\\ud800ll"}'
    for i in range(2):
        feed(run, call('"process"', params, f"p{i}"))
        feed(run, result('"process"', params, '{"details":{"status":"running"}}', f"p{i}"))
    (det,) = feed(run, call('"process"', params, "p2"))
    # generic, not known_poll_no_progress; the digest drops the surrogate (§2.2)
    assert det.detector == "generic_repeat"
    assert det.warning_key == "generic:process:" + sig("process", '{"action":"poll"}')


def test_6_exec_status_with_lone_surrogate_gets_no_projection():
    run = Run(LOW)
    res = '{"content":[{"type":"text","text":"x"}],"details":{"status":"comp\\udc00leted"}}'
    for i in range(3):
        feed(run, call('"exec"', '{"cmd":"ls"}', f"e{i}"))
        feed(run, result('"exec"', '{"cmd":"ls"}', res, f"e{i}"))
    (det,) = feed(run, call('"exec"', '{"cmd":"ls"}', "e3"))
    # §4.9 fallback (details + text), not the completed projection
    assert det.warning_key == (
        "generic:exec:" + sig("exec", '{"cmd":"ls"}') + ":" + sha('{"details":{"status":"completed"},"text":"x"}')
    )


def test_6_unknown_tool_name_stops_at_the_lone_surrogate():
    run = Run({"enabled": True, "unknownToolThreshold": 2})
    for i in range(2):
        feed(run, call('"dispatch"', "{}", f"u{i}"))
        feed(
            run,
            '{"type":"tool_result","agent_id":"a","run_id":"r","tool_name":"dispatch","tool_call_id":"u%d",'
            '"error":"Unknown tool: fo\\ud800o"}' % i,
        )
    (det,) = feed(run, call('"dispatch"', "{}", "u2"))
    assert det.warning_key == "unknown-tool:dispatch:fo"  # [a-z0-9_.-]+ ends before U+D800
    assert det.message == msg_unknown("fo", 2)


# ---------------------------------------------------------------- 8. and 9. blocked calls and their vetoes


def _blocked_run() -> tuple[Run, str]:
    run = Run(LOW)
    for _ in range(3):
        run.pair("read", {"p": 1}, result="same")
    return run, "generic:read:" + sig("read", '{"p":1}') + ":" + sha('"same"')


def test_8_blocked_call_without_id_next_idless_result_is_the_veto():
    run, key = _blocked_run()
    (det,) = run.call("read", {"p": 1}, id=None)
    assert (det.action, det.count, det.warning_key) == ("block", 3, key)
    assert run.result("read", {"p": 1}, result="same") == []  # the veto, whatever payload
    (det,) = run.call("read", {"p": 1}, id=None)
    assert det.count == 3  # nothing was recorded: still 3, not 4
    assert run.result("read", {"p": 1}, result="same") == []
    run.call("other", {})
    assert run.result("read", {"p": 1}, result="same") == []  # an ordinary id-less result: recorded
    (det,) = run.call("read", {"p": 1}, id=None)
    assert det.count == 4


def test_9_hundreds_of_blocked_calls_before_their_results_are_all_vetoed():
    run, key = _blocked_run()
    ids = [f"b{i}" for i in range(300)]
    for cid in ids:
        (det,) = run.call("read", {"p": 1}, id=cid)
        assert det.count == 3
    for cid in ids:
        assert run.result("read", {"p": 1}, result="same", id=cid) == []
    (det,) = run.call("read", {"p": 1}, id="after")
    assert (det.count, det.warning_key) == (3, key)
    assert run.state.blocked_overflow == 0


def test_9_overflow_beyond_the_bound_is_counted(monkeypatch):
    monkeypatch.setattr(engine, "MAX_BLOCKED_CALLS", 2)
    run, _ = _blocked_run()
    for cid in ("x1", "x2", "x3"):
        run.call("read", {"p": 1}, id=cid)
    assert run.state.blocked == ["x2", "x3"] and run.state.blocked_overflow == 1
    assert state_module.MAX_BLOCKED_CALLS >= 16384


# ---------------------------------------------------------------- 10. lines blank only to JavaScript


def test_10_js_blank_lines_are_skipped_and_not_counted():
    base = [call('"read"', "{}") for _ in range(3)]
    config = FleetConfig(LOW)
    (plain,) = list(replay_lines([line.encode() + b"\n" for line in base], config))
    assert plain["event_index"] == 2
    blanks = ["\u2028", "\u00a0", "\ufeff", "\u3000 \t", "\u2029\r"]
    lines = []
    for i, line in enumerate(base):
        lines += [blanks[i].encode() + b"\n", line.encode() + b"\n", blanks[i + 2].encode() + b"\n"]
    (row,) = list(replay_lines(lines, config))
    assert row["event_index"] == 2
    (row,) = list(replay_lines([b.encode() for b in blanks] + [line for line in base], config))  # str lines too
    assert row["event_index"] == 2
    # U+001C is whitespace to Python's str.isspace() but not to trim(): a (bad) event line
    items = list(replay_lines(["\x1c"] + base, config))
    assert isinstance(items[0], BadLine) and items[1]["event_index"] == 3


def test_a_note_shows_a_value_with_a_lone_surrogate_escaped():
    # found by test_property_config_loader_takes_any_json: a config note about such a value raised
    from loopwarden.schemas.config import FleetConfig, show

    assert show({"warning\ud800Threshold": 0}) == r'{"warning\ud800Threshold": 0}'
    config = FleetConfig.from_document({"tools": {"loopDetection": {"detectors": [{"a\ud800": 0}]}}})
    assert config.resolve("main").generic_repeat
