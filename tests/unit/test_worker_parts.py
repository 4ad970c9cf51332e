"""The worker's pure parts: input screening, dead-letter records, table codec, settings sources."""

from __future__ import annotations

import argparse
import base64
import json

import msgspec
import pytest

from loopwarden.detection import RunState
from loopwarden.schemas.events import EventDecodeError, decode_event
from loopwarden.worker.configfeed import block_of
from loopwarden.worker.runcodec import RunValue, decode_key, decode_value, encode_value, state_key
from loopwarden.worker.screening import dead_letter_value, nesting_depth, screen
from loopwarden.worker.settings import Settings, add_arguments, env_name, from_sources

CALL = {"type": "tool_call", "agent_id": "a", "run_id": " r1 ", "tool_name": "read"}


def _raw(**extra) -> bytes:
    return json.dumps({**CALL, **extra}).encode()


@pytest.mark.parametrize(
    "text, depth", [("{}", 1), ('[[1], {"a": [2]}]', 3), ('{"s": "[[[[{{{"}', 1), ('["\\"[[["]', 1), ("1", 0)]
)
def test_nesting_depth_ignores_brackets_in_strings(text, depth):
    assert nesting_depth(text.encode()) == depth


def test_screen_limits_before_decoding():
    assert screen(_raw(), 10_000, 8).agent_id == "a"
    with pytest.raises(EventDecodeError) as big:
        screen(_raw(params={"x": "y" * 200}), 100, 8)
    assert big.value.reason == "too_large"
    with pytest.raises(EventDecodeError) as deep:
        screen(_raw(params=json.loads("[" * 9 + "]" * 9)), 10_000, 8)
    assert deep.value.reason == "too_deep"
    # many brackets, shallow nesting: the cheap bound trips, the exact walk lets it through
    assert screen(_raw(params=[[1]] * 20), 10_000, 8).agent_id == "a"
    with pytest.raises(EventDecodeError) as empty:
        screen(None, 100, 8)
    assert empty.value.reason == "empty"


def test_dead_letter_value_carries_position_and_raw_bytes():
    raw = b"\xff not json"
    letter = json.loads(dead_letter_value(EventDecodeError("bad_json", "x"), "t", 3, 42, raw))
    assert letter == {
        "reason": "bad_json",
        "detail": "x",
        "topic": "t",
        "partition": 3,
        "offset": 42,
        "raw": base64.b64encode(raw).decode(),
    }


def test_state_key_and_value_round_trip():
    event = decode_event(_raw(session_id="s"))
    assert decode_key(state_key(event)) == ("s", "r1")
    value = RunValue(offset=7, touched=1.5, state=RunState())
    assert decode_value(encode_value(value)) == value
    ended = RunValue(offset=8, touched=2.0)
    assert decode_value(encode_value(ended)).state is None


def test_config_record_blocks():
    assert block_of(b'{"enabled": true}') == ({"enabled": True}, None)
    assert block_of(b"{tools: {loopDetection: {warningThreshold: 3}}}") == ({"warningThreshold": 3}, None)
    assert block_of(None) == (None, None)
    assert block_of(b"null") == (None, None)
    assert block_of(b'{"loopwarden": {"shadow": true}}') == (None, {"shadow": True})


def test_settings_precedence_flag_over_env_over_default():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    help_text = parser.format_help()
    for field in msgspec.structs.fields(Settings):
        assert env_name(field.name) in help_text
    args = parser.parse_args(["--port", "7001"])
    env = {"LOOPWARDEN_PORT": "7002", "LOOPWARDEN_LINGER_MS": "9", "LOOPWARDEN_FAST_PATH": "false"}
    s = from_sources(args, environ=env)
    assert (s.port, s.linger_ms, s.fast_path, s.host) == (7001, 9, False, "127.0.0.1")
    assert from_sources({"broker": "kafka://h1:1,kafka://h2:2"}, environ={}).bootstrap == "h1:1,h2:2"
