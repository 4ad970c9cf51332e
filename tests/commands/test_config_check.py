"""``loopwarden config check``: effective settings equal the resolution, notes say what was replaced and why."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwarden.cli import main as cli
from loopwarden.kafka.configfeed import ConfigFeed
from loopwarden.schemas.config import KNOB_CAPS, FleetConfig, overlay, parse_config_text, resolve_block
from loopwarden.schemas.config_check import check_document, check_file, explain_block

# Values OpenClaw might meet in a hand-written config: valid, zero, negative, fractional, huge, strings, ...
_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 60),
    st.sampled_from([0.0, 5.0, 2.5, -1.0, 1e300, float("inf"), float("-inf"), float("nan")]),
    st.sampled_from(["", "thirty", "10", "0"]),
    st.just([]),
    st.just({}),
)
_switches = st.dictionaries(st.sampled_from(["genericRepeat", "knownPollNoProgress", "pingPong"]), _values)
_block = st.dictionaries(
    st.sampled_from(
        [
            "enabled",
            "historySize",
            "warningThreshold",
            "criticalThreshold",
            "unknownToolThreshold",
            "globalCircuitBreakerThreshold",
            "detectors",
            "postCompactionGuard",
        ]
    ),
    _values,
    max_size=8,
).flatmap(
    lambda b: st.fixed_dictionaries(
        {
            **{k: st.just(v) for k, v in b.items()},
            **({"detectors": st.one_of(_switches, _values)} if "detectors" in b else {}),
            **(
                {"postCompactionGuard": st.one_of(st.dictionaries(st.just("windowSize"), _values), _values)}
                if "postCompactionGuard" in b
                else {}
            ),
        }
    )
)

FIELD_OF = {
    "enabled": "enabled",
    "historySize": "history_size",
    "warningThreshold": "warning_threshold",
    "criticalThreshold": "critical_threshold",
    "unknownToolThreshold": "unknown_tool_threshold",
    "globalCircuitBreakerThreshold": "global_circuit_breaker_threshold",
    "detectors.genericRepeat": "generic_repeat",
    "detectors.knownPollNoProgress": "known_poll_no_progress",
    "detectors.pingPong": "ping_pong",
    "postCompactionGuard.windowSize": "guard_window",
    "postCompactionGuard": "guard_window",
}


@settings(max_examples=600, deadline=None)
@given(_block, st.one_of(st.none(), _block))
def test_effective_values_equal_resolve_block_and_notes_agree(global_block, agent_block):
    block = overlay(global_block, agent_block)
    effective, notes = explain_block(block, agent_block)
    assert effective == resolve_block(block)
    last = {n.key: n for n in notes}  # a value may be replaced twice (null -> default -> raised)
    for key, note in last.items():
        if key in FIELD_OF:  # ("detectors" as a whole has no single field)
            assert getattr(effective, FIELD_OF[key]) == note.value, note
    assert all((n.source is None) == (agent_block is None) for n in notes)


@settings(max_examples=300, deadline=None)
@given(_block)
def test_every_replaced_number_has_a_note(block):
    effective, notes = explain_block(block)
    noted = {n.key for n in notes}
    for key, field in FIELD_OF.items():
        if "." in key or key == "enabled" or key not in block or key == "postCompactionGuard":
            continue
        raw = block[key]
        if isinstance(raw, bool) or getattr(effective, field) != raw:
            assert key in noted, (key, raw, notes)


def texts(report):
    return [n.text for b in report.blocks for n in b.notes]


def test_issue_examples_are_worded_as_promised():
    report = check_document(
        {
            "tools": {
                "loopDetecton": {},
                "loopDetection": {
                    "enabled": True,
                    "historySize": "thirty",
                    "warningThreshold": 10,
                    "criticalThreshold": 5,
                },
            }
        }
    )
    assert "criticalThreshold 5 ≤ warningThreshold 10: raised to 11" in texts(report)
    assert "historySize 'thirty' is not a positive integer: default 30" in texts(report)
    assert report.warnings == ["tools.loopDetecton: unknown key, ignored (did you mean loopDetection?)"]
    assert report.ok


def test_global_clamp_follows_the_raised_critical():
    _eff, notes = explain_block(
        {"enabled": True, "warningThreshold": 5, "criticalThreshold": 8, "globalCircuitBreakerThreshold": 6}
    )
    assert [n.text for n in notes if n.key == "globalCircuitBreakerThreshold"] == [
        "globalCircuitBreakerThreshold 6 ≤ criticalThreshold 8: raised to 9"
    ]


def test_other_openclaw_keys_are_not_warned_about():
    doc = {
        "gateway": {"port": 1},
        "models": {},
        "channels": {},
        "tools": {"exec": {"host": "sandbox"}, "web": {}, "loopDetection": {"enabled": True}},
        "agents": {"defaults": {}, "list": [{"id": "a", "name": "A", "workspace": "/w", "tools": {"profile": "x"}}]},
    }
    assert check_document(doc).warnings == []


def test_unknown_keys_inside_blocks_get_suggestions():
    doc = {
        "tools": {
            "loopDetection": {
                "enabled": True,
                "criticalTreshold": 4,
                "detectors": {"pingpong": False},
                "postCompactionGuard": {"window": 2},
            }
        },
        "loopwardn": {},
        "loopwarden": {"shadw": True, "incidents": {"minRun": 3}},
        "agents": {
            "list": [{"id": "x", "tools": {"LoopDetection": {}}, "loopwarden": {"escalation": {"afterBlock": 2}}}]
        },
    }
    w = "\n".join(check_document(doc).warnings)
    for expected in (
        "tools.loopDetection.criticalTreshold: unknown key, ignored (did you mean criticalThreshold?)",
        "tools.loopDetection.detectors.pingpong: unknown key, ignored (did you mean pingPong?)",
        "tools.loopDetection.postCompactionGuard.window: unknown key, ignored (did you mean windowSize?)",
        "loopwardn: unknown top-level key, ignored (did you mean loopwarden?)",
        "loopwarden.shadw: unknown key ignored (did you mean shadow?)",
        "(did you mean minRuns?)",
        "agents.list[0] (x).tools.LoopDetection: unknown key, ignored (did you mean loopDetection?)",
        "agents.list[0] (x): loopwarden.escalation:",
    ):
        assert expected in w, (expected, w)


def test_agent_notes_say_where_the_value_came_from():
    doc = {
        "tools": {"loopDetection": {"enabled": True, "historySize": 0}},
        "agents": {
            "list": [{"id": "Coder", "tools": {"loopDetection": {"warningThreshold": 5, "criticalThreshold": 8}}}]
        },
    }
    report = check_document(doc)
    agent = next(b for b in report.blocks if b.agent_id == "coder")
    assert (agent.effective.warning_threshold, agent.effective.critical_threshold) == (5, 8)
    assert agent.effective == FleetConfig.from_document(doc).resolve("coder")
    by_key = {n.key: n for n in agent.notes}
    assert by_key["historySize"].source == "global"
    assert (
        "counts below 10 warn nobody" in by_key["warningThreshold"].text
        and by_key["warningThreshold"].source == "agent"
    )


def write(tmp_path, text, name="c.json5"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_cli_exit_codes_and_json(tmp_path, capsys):
    good = write(tmp_path, "{tools: {loopDetection: {enabled: true}}}")
    typo = write(tmp_path, "{tools: {loopDetection: {enabled: true, histrySize: 5}}}", "t.json5")
    bad = write(tmp_path, "{\n  tools: {\n    loopDetection: {enabled: true,,}\n  }\n}\n", "bad.json5")
    assert cli(["config", "check", good]) == 0
    assert "0 errors, 0 warnings" in capsys.readouterr().out
    assert cli(["config", "check", typo]) == 0
    assert "did you mean historySize?" in capsys.readouterr().out
    assert cli(["config", "check", "--strict", typo]) == 1
    capsys.readouterr()
    assert cli(["config", "check", bad]) == 2
    captured = capsys.readouterr()
    assert (
        captured.out == ""
        and captured.err == f"loopwarden config check: {bad} line 3: not valid JSON/JSON5: Stray comma\n"
    )
    assert cli(["config", "check", "--json", bad]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["errors"] and doc["blocks"] == []
    assert cli(["config", "check", "--json", typo]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["blocks"][0]["effective"]["history_size"] == 30
    assert cli(["config", "check", str(tmp_path / "missing.json")]) == 2
    assert "cannot read config" in capsys.readouterr().err


def test_check_file_returns_the_fleet_config_the_worker_uses(tmp_path):
    path = write(tmp_path, "{tools: {loopDetection: {enabled: true, warningThreshold: 3}}}")
    fleet, report = check_file(path)
    assert report.ok and fleet.resolve("any").warning_threshold == 3
    fleet, report = check_file(write(tmp_path, "[1, 2]", "list.json"))
    assert fleet is None and report.errors == ["the config must be an object, not [1,2]"]


def test_live_config_record_logs_the_same_warnings(caplog):
    feed = ConfigFeed(FleetConfig(), "127.0.0.1:1", "t")
    with caplog.at_level(logging.WARNING, logger="loopwarden.kafka.configfeed"):
        assert feed.apply(b"coder", b'{"enabled": true, "warningTreshold": 3}')
    assert (
        "record 'coder': loopDetection.warningTreshold: unknown key, ignored (did you mean warningThreshold?)"
        in caplog.text
    )
    assert feed.fleet.resolve("coder").enabled is True


def test_numbers_above_their_cap_are_clamped_and_noted():
    """Issue 23: ``historySize: 1e9`` from one config record made a run's state unbounded."""
    block = {
        "enabled": True,
        "historySize": 1e9,
        "warningThreshold": 10**12,
        "postCompactionGuard": {"windowSize": 5000},
    }
    effective, notes = explain_block(block)
    assert effective == resolve_block(block)
    assert effective.history_size == KNOB_CAPS["historySize"] == 3_500
    assert effective.guard_window == KNOB_CAPS["windowSize"]
    assert effective.warning_threshold == KNOB_CAPS["warningThreshold"]
    assert effective.critical_threshold == KNOB_CAPS["warningThreshold"] + 1  # §1.5 after the cap
    texts = [n.text for n in notes]
    assert (
        "historySize 1000000000 is above the cap 3500 (a run's stored state must fit one Kafka record): 3500" in texts
    )
    assert "postCompactionGuard.windowSize 5000 is above the cap 1000: 1000" in texts
    # within the caps nothing changes, and nothing is noted
    at_cap = {"enabled": True, "historySize": 3_500, "postCompactionGuard": {"windowSize": 1000}}
    effective, notes = explain_block(at_cap)
    assert (effective.history_size, effective.guard_window, notes) == (3_500, 1000, [])


def test_a_live_record_above_a_cap_is_logged(caplog):
    feed = ConfigFeed(FleetConfig(), "127.0.0.1:1", "t")
    with caplog.at_level(logging.WARNING, logger="loopwarden.kafka.configfeed"):
        assert feed.apply(b"coder", b'{"enabled": true, "historySize": 1e9}')
    assert (
        "record 'coder': loopDetection.historySize 1000000000 is above the cap 3500 "
        "(a run's stored state must fit one Kafka record): 3500" in caplog.text
    )
    assert feed.fleet.resolve("coder").history_size == 3_500


# ---------------------------------------------------------------- the notice when detection is off


def test_detection_off_notice_is_said_exactly_when_the_global_block_is_not_enabled():
    from loopwarden.schemas.config_check import detection_off_notice

    off = detection_off_notice(FleetConfig())
    assert off is not None and "loop detection is off" in off and "enabled: true" in off
    assert detection_off_notice(FleetConfig({"enabled": "yes"})) is None  # truthy counts, as in OpenClaw
    assert detection_off_notice(FleetConfig({"enabled": True, "warningThreshold": 5})) is None
    assert detection_off_notice(FleetConfig({"enabled": False})) is not None
    some = detection_off_notice(FleetConfig({}, {"coder": {"enabled": True}, "other": {}}))
    assert some is not None and "on only for the listed agents coder" in some


def test_a_threshold_the_window_can_never_reach_is_a_warning():
    # a count covers the window's records: at most historySize (ping-pong historySize + 1)
    doc = {
        "tools": {"loopDetection": {"enabled": True}},
        "agents": {"list": [{"id": "research-bot", "tools": {"loopDetection": {"criticalThreshold": 40}}}]},
    }
    warnings = check_document(doc).warnings
    assert warnings == [
        "agent research-bot: criticalThreshold 40 can never be reached with historySize 30: "
        "genericRepeat and knownPollNoProgress and pingPong never block; "
        "raise historySize to at least 40 or lower criticalThreshold",
        # raised above the critical threshold (RULES.md §1.5), so out of reach too
        "agent research-bot: globalCircuitBreakerThreshold 41 can never be reached with historySize 30; "
        "raise historySize to at least 41 or lower globalCircuitBreakerThreshold",
    ]
    # ping-pong alone still reaches historySize + 1
    doc["agents"]["list"][0]["tools"]["loopDetection"] = {"criticalThreshold": 31}
    assert "genericRepeat and knownPollNoProgress never block" in check_document(doc).warnings[0]
    # within the window: silent; the global block is checked too
    doc["agents"]["list"][0]["tools"]["loopDetection"] = {"historySize": 50, "criticalThreshold": 40}
    assert check_document(doc).warnings == []
    doc["tools"]["loopDetection"]["unknownToolThreshold"] = 31
    assert check_document(doc).warnings == [
        "tools.loopDetection: unknownToolThreshold 31 can never be reached with historySize 30; "
        "raise historySize to at least 31 or lower unknownToolThreshold"
    ]


def test_the_shipped_and_readme_configs_can_block():
    import re

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    example = re.search(r"## Configuration.*?```json5\n(.*?)```", readme, re.S).group(1)
    for text in (example, (root / "deploy/config/loopwarden.json5").read_text()):
        assert check_document(parse_config_text(text)).warnings == []


TYPO = "{tools: {loopDetection: {enabled: true, warningTreshold: 5}}}"


def test_every_reader_of_a_config_file_reports_its_typos(tmp_path, capsys, caplog):
    from loopwarden.runner.local import fleet_config

    config = tmp_path / "typo.json5"
    config.write_text(TYPO)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"type":"tool_call","agent_id":"a","run_id":"r","tool_name":"read","params":{}}\n')
    for argv in (["replay", "--config", str(config), str(trace)], ["tune", "--config", str(config), str(trace)]):
        capsys.readouterr()
        assert cli(argv) == 0
        err = capsys.readouterr().err
        assert "config warning: tools.loopDetection.warningTreshold: unknown key" in err, argv
        assert "did you mean warningThreshold" in err, argv
    with caplog.at_level(logging.WARNING, logger="loopwarden.runner.local"):
        fleet = fleet_config(str(config))
    assert fleet.resolve("a").enabled
    assert any("warningTreshold: unknown key" in r.getMessage() for r in caplog.records)


def test_the_runner_refuses_an_unusable_config_file_with_its_reason(tmp_path):
    import pytest

    from loopwarden.runner.local import fleet_config
    from loopwarden.schemas.config import ConfigError

    bad = tmp_path / "bad.json5"
    bad.write_text("{tools: ")
    with pytest.raises(ConfigError, match="bad.json5"):
        fleet_config(str(bad))


def test_a_run_at_the_history_cap_fits_one_kafka_record():
    # a long run at the largest historySize must not outgrow the changelog record (the worker would reset it)
    from loopwarden.bench.state import at_cap

    report = at_cap()
    assert report["fits"], report
    assert report["stored_bytes_64_char_names"] <= report["record_limit"]


def test_a_lone_surrogate_in_a_nested_key_is_shown_not_raised():
    # found by test_property_config_loader_takes_any_json: showing the value raised UnicodeEncodeError
    doc = {"tools": {"loopDetection": {"enabled": True, "detectors": [{"warning\ud800Threshold": 0}]}}}
    assert check_document(doc).errors == []
