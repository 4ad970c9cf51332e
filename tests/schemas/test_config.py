"""streams/detection/RULES.md §1 (configuration) and §12.1/§12.9: overlay, validation, clamping, switches, files."""

from __future__ import annotations

import pytest

from loopwarden.schemas.config import ConfigError, FleetConfig, load_config, overlay, parse_config_text, resolve_block

NUMERIC = {
    "historySize": ("history_size", 30),
    "warningThreshold": ("warning_threshold", 10),
    "criticalThreshold": ("critical_threshold", 20),
    "unknownToolThreshold": ("unknown_tool_threshold", 10),
    "globalCircuitBreakerThreshold": ("global_circuit_breaker_threshold", 30),
}


# ---------------------------------------------------------------- §1.1 lookup


def test_rule_1_1_global_block_and_agent_list_from_document():
    doc = {
        "tools": {"loopDetection": {"enabled": True, "warningThreshold": 4}},
        "agents": {"list": [{"id": "coder", "tools": {"loopDetection": {"warningThreshold": 6}}}]},
    }
    fleet = FleetConfig.from_document(doc)
    assert fleet.resolve("coder").warning_threshold == 6
    assert fleet.resolve("coder").enabled is True
    assert fleet.resolve("someone-else").warning_threshold == 4


def test_rule_1_1_agent_ids_are_normalized_trim_and_lowercase():
    doc = {
        "tools": {"loopDetection": {"enabled": True}},
        "agents": {"list": [{"id": "  Ops-Bot ", "tools": {"loopDetection": {"criticalThreshold": 42}}}]},
    }
    fleet = FleetConfig.from_document(doc)
    for agent in ("ops-bot", "OPS-BOT", " Ops-Bot  ", "ops-bot\t"):
        assert fleet.resolve(agent).critical_threshold == 42, agent
    assert fleet.resolve("ops-bot2").critical_threshold == 20


def test_rule_1_1_no_config_at_all_gives_defaults():
    fleet = FleetConfig.from_document({})
    r = fleet.resolve("x")
    assert (r.enabled, r.history_size, r.warning_threshold, r.critical_threshold) == (False, 30, 10, 20)
    assert r.guard_window == 3


# ---------------------------------------------------------------- §1.2 overlay


def test_rule_1_2_agent_without_block_uses_global_unchanged():
    g = {"enabled": True, "warningThreshold": 5}
    assert overlay(g, None) == g
    assert overlay(None, None) is None


def test_rule_1_2_no_global_block_uses_agent_block_unchanged():
    a = {"enabled": True, "criticalThreshold": 7}
    assert overlay(None, a) == a


def test_rule_1_2_shallow_copy_agent_keys_win_other_global_keys_kept():
    g = {"enabled": True, "warningThreshold": 5, "historySize": 40}
    a = {"warningThreshold": 8}
    merged = overlay(g, a)
    assert merged["warningThreshold"] == 8
    assert merged["historySize"] == 40
    assert merged["enabled"] is True
    assert g == {"enabled": True, "warningThreshold": 5, "historySize": 40}, "global block must not be mutated"


def test_rule_1_2_detectors_merged_key_by_key():
    g = {"enabled": True, "detectors": {"genericRepeat": False, "pingPong": False}}
    a = {"detectors": {"pingPong": True}}
    r = resolve_block(overlay(g, a))
    assert r.generic_repeat is False  # global key kept
    assert r.ping_pong is True  # agent key wins
    assert r.known_poll_no_progress is True  # default


def test_rule_1_2_post_compaction_guard_merged_key_by_key():
    g = {"postCompactionGuard": {"windowSize": 5, "other": 1}}
    a = {"postCompactionGuard": {"extra": True}}
    merged = overlay(g, a)
    assert merged["postCompactionGuard"]["windowSize"] == 5
    assert merged["postCompactionGuard"]["extra"] is True
    assert resolve_block(merged).guard_window == 5
    a2 = {"postCompactionGuard": {"windowSize": 2}}
    assert resolve_block(overlay(g, a2)).guard_window == 2


def test_rule_1_2_explicit_null_replaces_global_value_and_default_applies():
    g = {"enabled": True, "warningThreshold": 5, "criticalThreshold": 7, "historySize": 12}
    a = {"warningThreshold": None}
    merged = overlay(g, a)
    assert "warningThreshold" in merged and merged["warningThreshold"] is None
    r = resolve_block(merged)
    assert r.warning_threshold == 10  # default, not the global 5
    assert r.critical_threshold == 11  # 7 <= 10 -> 11 (rule 1.5)
    assert r.history_size == 12


def test_rule_1_2_missing_agent_key_keeps_global_value_through_fleet():
    doc = {
        "tools": {"loopDetection": {"enabled": True, "historySize": 50, "detectors": {"pingPong": False}}},
        "agents": {
            "list": [
                {"id": "a", "tools": {"loopDetection": {"enabled": False}}},
                {"id": "b", "tools": {"loopDetection": {"detectors": {"genericRepeat": False}}}},
            ]
        },
    }
    fleet = FleetConfig.from_document(doc)
    a = fleet.resolve("a")
    assert a.history_size == 50 and a.enabled is False and a.ping_pong is False
    b = fleet.resolve("b")
    assert b.enabled is True and b.ping_pong is False and b.generic_repeat is False


def test_rule_1_2_explicit_null_enabled_in_agent_block_disables_detection():
    fleet = FleetConfig.from_document(
        {
            "tools": {"loopDetection": {"enabled": True}},
            "agents": {"list": [{"id": "a", "tools": {"loopDetection": {"enabled": None}}}]},
        }
    )
    r = fleet.resolve("a")
    assert r.enabled is False
    assert r.record_calls is True and r.guard_enabled is True  # null is not exactly false


# ---------------------------------------------------------------- §1.3 enabled


@pytest.mark.parametrize(
    "block, enabled, exact_false",
    [
        (None, False, False),
        ({}, False, False),
        ({"enabled": None}, False, False),
        ({"enabled": False}, False, True),
        ({"enabled": True}, True, False),
        ({"enabled": 1}, True, False),
        ({"enabled": "yes"}, True, False),
        ({"enabled": {}}, True, False),
        ({"enabled": 0}, False, False),
        ({"enabled": ""}, False, False),
    ],
)
def test_rule_1_3_enabled_missing_false_truthy(block, enabled, exact_false):
    r = resolve_block(block)
    assert r.enabled is enabled
    assert r.record_calls is (not exact_false)
    assert r.guard_enabled is (not exact_false)


# ---------------------------------------------------------------- §1.4 numbers


@pytest.mark.parametrize("key", list(NUMERIC))
@pytest.mark.parametrize("bad", [0, -1, -20, 5.5, 0.5, "5", "20", True, False, None, [5], {"v": 5}])
def test_rule_1_4_invalid_numbers_fall_back_to_default(key, bad):
    attr, default = NUMERIC[key]
    assert getattr(resolve_block({"enabled": True, key: bad}), attr) == default


@pytest.mark.parametrize(
    "key, text, expected",
    [
        ("historySize", "5.0", 5),
        ("unknownToolThreshold", "5.0", 5),
        ("warningThreshold", "5.0", 5),
        ("criticalThreshold", "15.0", 15),
        ("globalCircuitBreakerThreshold", "25.0", 25),
        ("historySize", "7", 7),
    ],
)
def test_rule_1_4_integral_float_from_json_is_accepted(key, text, expected):
    doc = parse_config_text('{"tools": {"loopDetection": {"enabled": true, "%s": %s}}}' % (key, text))
    attr, _ = NUMERIC[key]
    assert getattr(FleetConfig.from_document(doc).resolve("a"), attr) == expected


def test_rule_1_4_defaults():
    r = resolve_block({"enabled": True})
    assert (
        r.history_size,
        r.warning_threshold,
        r.critical_threshold,
        r.unknown_tool_threshold,
        r.global_circuit_breaker_threshold,
    ) == (30, 10, 20, 10, 30)


# ---------------------------------------------------------------- §1.5 clamping


@pytest.mark.parametrize(
    "block, warning, critical, global_",
    [
        ({"warningThreshold": 10, "criticalThreshold": 5}, 10, 11, 30),  # spec example
        ({"warningThreshold": 5, "criticalThreshold": 8, "globalCircuitBreakerThreshold": 6}, 5, 8, 9),  # spec example
        ({"warningThreshold": 7, "criticalThreshold": 7}, 7, 8, 30),
        ({"warningThreshold": 25}, 25, 26, 30),
        ({"warningThreshold": 30}, 30, 31, 32),  # critical raised first, then global from the raised value
        ({"criticalThreshold": 25, "globalCircuitBreakerThreshold": 25}, 10, 25, 26),
        ({"criticalThreshold": 40}, 10, 40, 41),
        ({"warningThreshold": 2, "criticalThreshold": 3, "globalCircuitBreakerThreshold": 4}, 2, 3, 4),
        ({"warningThreshold": 3, "criticalThreshold": 2, "globalCircuitBreakerThreshold": 4}, 3, 4, 5),
        ({"warningThreshold": 0, "criticalThreshold": 5}, 10, 11, 30),  # rule 1.4 before 1.5
    ],
)
def test_rule_1_5_clamping(block, warning, critical, global_):
    r = resolve_block({"enabled": True, **block})
    assert (r.warning_threshold, r.critical_threshold, r.global_circuit_breaker_threshold) == (
        warning,
        critical,
        global_,
    )


def test_rule_1_5_history_size_and_unknown_threshold_never_clamped():
    r = resolve_block({"enabled": True, "historySize": 1, "unknownToolThreshold": 1, "warningThreshold": 50})
    assert r.history_size == 1
    assert r.unknown_tool_threshold == 1


# ---------------------------------------------------------------- §1.6 detectors


@pytest.mark.parametrize(
    "detectors", [None, {}, {"genericRepeat": None, "knownPollNoProgress": None, "pingPong": None}, "off", 5]
)
def test_rule_1_6_detector_switches_default_true(detectors):
    block = {"enabled": True}
    if detectors is not None:
        block["detectors"] = detectors
    r = resolve_block(block)
    assert (r.generic_repeat, r.known_poll_no_progress, r.ping_pong) == (True, True, True)


@pytest.mark.parametrize(
    "name, attr",
    [("genericRepeat", "generic_repeat"), ("knownPollNoProgress", "known_poll_no_progress"), ("pingPong", "ping_pong")],
)
def test_rule_1_6_each_switch_can_be_turned_off(name, attr):
    r = resolve_block({"enabled": True, "detectors": {name: False}})
    assert getattr(r, attr) is False
    others = {"generic_repeat", "known_poll_no_progress", "ping_pong"} - {attr}
    assert all(getattr(r, o) is True for o in others)


# ---------------------------------------------------------------- §1.7 windowSize


@pytest.mark.parametrize(
    "guard, expected",
    [
        (None, 3),
        ({}, 3),
        ({"windowSize": 5}, 5),
        ({"windowSize": 1}, 1),
        ({"windowSize": 0}, 3),
        ({"windowSize": -2}, 3),
        ({"windowSize": 2.5}, 3),
        ({"windowSize": "4"}, 3),
        ({"windowSize": None}, 3),
        ({"windowSize": True}, 3),
    ],
)
def test_rule_1_7_window_size(guard, expected):
    block = {"enabled": True}
    if guard is not None:
        block["postCompactionGuard"] = guard
    assert resolve_block(block).guard_window == expected


def test_rule_1_7_window_size_integral_float_from_json5():
    doc = parse_config_text("{tools: {loopDetection: {postCompactionGuard: {windowSize: 4.0}}}}")
    assert FleetConfig.from_document(doc).resolve("x").guard_window == 4


# ---------------------------------------------------------------- files (JSON / JSON5)


def test_config_file_json5_comments_trailing_commas_unquoted_keys(tmp_path):
    path = tmp_path / "openclaw.json5"
    path.write_text(
        """// OpenClaw config
        {
          tools: {
            loopDetection: {
              enabled: true,
              warningThreshold: 3, /* low for tests */
              criticalThreshold: 2,
              detectors: {pingPong: false,},
            },
          },
          agents: {list: [
            {id: 'Reviewer', tools: {loopDetection: {historySize: 8, postCompactionGuard: {windowSize: 2}}}},
          ]},
        }
        """,
        encoding="utf-8",
    )
    fleet = load_config(path)
    g = fleet.resolve("anyone")
    assert (g.enabled, g.warning_threshold, g.critical_threshold, g.global_circuit_breaker_threshold) == (
        True,
        3,
        4,
        30,
    )
    assert g.ping_pong is False and g.generic_repeat is True
    r = fleet.resolve(" reviewer ")
    assert (r.history_size, r.guard_window, r.warning_threshold, r.ping_pong) == (8, 2, 3, False)


def test_config_file_plain_json(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"tools": {"loopDetection": {"enabled": true, "historySize": 12}}}', encoding="utf-8")
    r = load_config(path).resolve("a")
    assert r.enabled is True and r.history_size == 12


def test_config_file_none_gives_defaults():
    r = load_config(None).resolve("a")
    assert r.enabled is False and r.guard_enabled is True


def test_config_file_unreadable_or_invalid_raises(tmp_path):
    with pytest.raises(ConfigError):
        load_config(tmp_path / "missing.json5")
    bad = tmp_path / "bad.json5"
    bad.write_text("{tools: {loopDetection: {enabled: true,,}}", encoding="utf-8")
    with pytest.raises(ConfigError):
        load_config(bad)
    notobj = tmp_path / "list.json"
    notobj.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ConfigError):
        load_config(notobj)


# ---------------------------------------------------------------- §12.1 / §12.9


def test_rule_12_1_non_default_knobs_are_honoured():
    r = resolve_block(
        {
            "enabled": True,
            "historySize": 50,
            "warningThreshold": 4,
            "criticalThreshold": 9,
            "unknownToolThreshold": 2,
            "globalCircuitBreakerThreshold": 12,
            "detectors": {"genericRepeat": False},
        }
    )
    assert (
        r.history_size,
        r.warning_threshold,
        r.critical_threshold,
        r.unknown_tool_threshold,
        r.global_circuit_breaker_threshold,
        r.generic_repeat,
    ) == (50, 4, 9, 2, 12, False)


def test_rule_12_9_agent_guard_object_merges_not_replaces():
    doc = {
        "tools": {"loopDetection": {"postCompactionGuard": {"windowSize": 6}}},
        "agents": {"list": [{"id": "a", "tools": {"loopDetection": {"postCompactionGuard": {"note": "x"}}}}]},
    }
    assert FleetConfig.from_document(doc).resolve("a").guard_window == 6


@pytest.mark.parametrize(
    "literal, expected",
    [("Infinity", 10), ("-Infinity", 10), ("NaN", 10), ("0x10", 16), ("+7", 7), ("1e1", 10), ("12.0", 12), ("0.0", 10)],
)
def test_rule_1_4_json5_number_literals(literal, expected):
    doc = parse_config_text("{tools: {loopDetection: {warningThreshold: %s}}}" % literal)
    assert FleetConfig.from_document(doc).resolve("a").warning_threshold == expected


def test_rule_1_1_agent_id_trim_is_javascript_trim():
    doc = {
        "tools": {"loopDetection": {"enabled": True}},
        "agents": {"list": [{"id": "ops", "tools": {"loopDetection": {"historySize": 7}}}]},
    }
    fleet = FleetConfig.from_document(doc)
    assert fleet.resolve("\ufeffOps\u00a0").history_size == 7  # BOM and NBSP are JS whitespace
    assert fleet.resolve("ops\x85").history_size == 30  # U+0085 is not: a different agent


HOSTILE_CONFIG_TEXTS = """
from loopwarden.schemas.config import ConfigError, parse_config_text
n = 250_000
for text in ('{"a": "' + '\\\\"' * n, "{'a': '" + "\\\\'" * n, '{"a": ' + "1" * n + "x}", "/*" * n):
    try:
        parse_config_text(text)
    except ConfigError:
        print("refused")
"""


def test_hostile_config_text_is_parsed_in_linear_time():
    """Issue 23 (config records are input too): the fallback that rewrites overflowing numerals retried its
    string pattern from every escaped quote of an unterminated string, and backtracked over a digit run
    (4,000 of either: 2-4 s; these: hours). In a subprocess; the timeout only guards the suite."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", HOSTILE_CONFIG_TEXTS], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["refused"] * 4
