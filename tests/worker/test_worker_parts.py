"""The worker's pure parts: input screening, dead-letter records, table codec, settings sources."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwarden.detection import RunState
from loopwarden.kafka.configfeed import block_of
from loopwarden.schemas.events import ID_CAPS, MAX_ID_CHARS, EventDecodeError, decode_event
from loopwarden.schemas.verdicts import MAX_DEAD_LETTER_RAW
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
        "size": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }


def test_dead_letter_value_keeps_a_bounded_prefix_with_the_size_and_digest_of_the_whole():
    raw = b"x" * 1_000_000  # a record out of a compressed batch: the letter must not copy it
    value = dead_letter_value(EventDecodeError("bad_json", "x"), "t", 0, 1, raw)
    letter = json.loads(value)
    assert base64.b64decode(letter["raw"]) == raw[:MAX_DEAD_LETTER_RAW] and len(value) < 2 * MAX_DEAD_LETTER_RAW
    assert (letter["size"], letter["sha256"]) == (len(raw), hashlib.sha256(raw).hexdigest())


def test_state_key_and_value_round_trip():
    event = decode_event(_raw(session_id="s"))
    assert decode_key(state_key(event)) == ("a", "s", "r1")
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


# -- issue 23: hostile shapes ---------------------------------------------------------------------

HOSTILE_ESCAPES = (
    "import sys\n"
    "from loopwarden.worker.screening import screen\n"
    "from loopwarden.schemas.events import EventDecodeError\n"
    'raw = b\'{"type":"tool_call","agent_id":"a","params":"\' + b\'[\' * 70 + b\'\\\\"\' * 500_000\n'
    "try:\n"
    "    screen(raw, 1_048_576, 64)\n"
    "except EventDecodeError as exc:\n"
    "    print(exc.reason)\n"
)


def test_an_unterminated_run_of_escaped_quotes_is_screened_in_linear_time():
    """Issue 23: the string regex of the depth check retried from every ``\\"`` of an unterminated
    string, quadratic in its length (31 KiB: 3.5 s; this 1 MiB record: about an hour). In a subprocess
    with a timeout a hundred times above what a linear scan needs on a loaded machine."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", HOSTILE_ESCAPES], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "bad_json"  # brackets in a string: the decoder refuses it


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\\\ab\u00e9\ud800'),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\\\a'), c, max_size=3),
    max_leaves=12,
)


@given(_json_values, st.booleans())
def test_nesting_depth_is_exact_on_any_json(value, ascii_only):
    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    assert nesting_depth(raw) == _depth(value)


@pytest.mark.parametrize(
    "field, cap", [(f, c) for f, c in ID_CAPS.items() if f not in ("agent_id", "tool_name", "verdict_id")]
)
def test_identifiers_over_their_cap_are_dead_lettered(field, cap):
    assert getattr(decode_event(json.dumps({**CALL, field: "x" * cap}).encode()), field) == "x" * cap
    with pytest.raises(EventDecodeError) as exc:
        decode_event(json.dumps({**CALL, field: "x" * (cap + 1)}).encode())
    assert exc.value.reason == "id_too_long" and field in exc.value.detail


def test_agent_id_tool_name_and_verdict_id_caps():
    assert decode_event(_raw(agent_id="a" * 512, tool_name="t" * 256)).tool_name == "t" * 256
    ack = {"type": "verdict_ack", "agent_id": "a", "verdict_id": "v" * 512, "outcome": "applied"}
    assert decode_event(json.dumps(ack).encode()).verdict_id == "v" * 512
    for raw in (
        _raw(agent_id="a" * 513),
        _raw(tool_name="t" * 257),
        json.dumps({**ack, "verdict_id": "v" * 513}).encode(),
        json.dumps({"type": "run_end", "agent_id": "a", "session_id": "\ud800" * 513}).encode(),
    ):
        with pytest.raises(EventDecodeError) as exc:
            screen(raw, 1_048_576, 64)
        assert exc.value.reason == "id_too_long"


def test_an_id_over_its_cap_is_judged_after_the_types_and_the_blank_agent_id():
    # msgspec checks the caps as it decodes; the reasons keep their order: a wrong type anywhere
    # first, then a blank agent id, then the identifier over its cap
    long = "x" * (MAX_ID_CHARS + 1)
    cases = [
        ({**CALL, "run_id": long, "ts": "soon"}, "wrong_type"),
        ({**CALL, "run_id": long, "agent_id": " "}, "blank_agent_id"),
        ({**CALL, "run_id": long, "event_id": long}, "id_too_long"),
        ({**CALL, "run_id": long, "session_id": "\ud800"}, "id_too_long"),  # the slow (JSON.parse) path
    ]
    for record, reason in cases:
        with pytest.raises(EventDecodeError) as exc:
            decode_event(json.dumps(record).encode("utf-8", "surrogatepass"))
        assert exc.value.reason == reason, record
