"""The strict envelope and the one table of dead-letter reasons (project issue 8).

Envelope fields are taken as sent (lone surrogates included); every invalid
record gets exactly one documented reason; nothing but EventDecodeError ever
leaves the screening code; what the worker writes back (verdicts, dead letters,
table keys) stays encodable whatever the strings hold.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwarden.schemas.events import (
    DEAD_LETTER_REASONS,
    EventDecodeError,
    ToolCall,
    ToolResult,
    decode_event,
    run_key,
    state_key,
)
from loopwarden.schemas.jsvalues import JS_WHITESPACE
from loopwarden.schemas.verdicts import Verdict, encode_verdict
from loopwarden.worker.runcodec import decode_key
from loopwarden.worker.runcodec import state_key as table_key
from loopwarden.worker.screening import dead_letter_value, screen

WIRE = Path(__file__).resolve().parents[2] / "schemas" / "WIRE.md"
LIMIT_BYTES, LIMIT_DEPTH = 1 << 20, 64


def reason_of(raw: bytes) -> str:
    with pytest.raises(EventDecodeError) as info:
        screen(raw, LIMIT_BYTES, LIMIT_DEPTH)
    assert info.value.reason in DEAD_LETTER_REASONS
    return info.value.reason


# ---------------------------------------------------------------- taken as sent


def test_lone_surrogate_in_type_is_an_unknown_type():
    assert reason_of(b'{"type":"tool_\\udbffcall","agent_id":"a"}') == "unknown_type"


def test_envelope_strings_keep_lone_surrogates():
    raw = (
        b'{"type":"tool_call","agent_id":"a\\ud800","run_id":"r\\udc01","session_id":"s\\udbff",'
        b'"tool_call_id":"c\\ud801","event_id":"e\\udfff","tool_name":"we\\udc00b"}'
    )
    e = decode_event(raw)
    assert isinstance(e, ToolCall)
    assert (e.agent_id, e.run_id, e.session_id) == ("a\ud800", "r\udc01", "s\udbff")
    assert (e.tool_call_id, e.event_id, e.tool_name) == ("c\ud801", "e\udfff", "we\udc00b")


def test_ts_beyond_the_double_range_reads_as_null_with_or_without_a_surrogate():
    for literal in (b"1e400", b"-1e400", b"1" + b"0" * 400, b"1" + b"0" * 5000):
        plain = decode_event(b'{"type":"run_end","agent_id":"a","ts":' + literal + b"}")
        odd = decode_event(b'{"type":"run_end","agent_id":"a","x":"\\ud800","ts":' + literal + b"}")
        assert plain.ts is None and odd.ts is None
    assert decode_event(b'{"type":"run_end","agent_id":"a","ts":1e-400}').ts == 0


@pytest.mark.parametrize("surrogate", [b"", b',"x":"\\ud800"'])
@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (b'{"agent_id":"a"', "missing_field"),
        (b'{"type":null,"agent_id":"a"', "missing_field"),
        (b'{"type":"tool_call"', "missing_field"),
        (b'{"type":"tool_call","agent_id":null', "missing_field"),
        (b'{"type":5,"agent_id":"a"', "wrong_type"),
        (b'{"type":"tool_call","agent_id":7', "wrong_type"),
        (b'{"type":"tool_call","agent_id":"a","tool_call_id":7', "wrong_type"),
        (b'{"type":"tool_call","agent_id":"a","ts":"x"', "wrong_type"),
        (b'{"type":"tool_call","agent_id":"a","await_decision":"yes"', "wrong_type"),
        (b'{"type":"tool_dance","agent_id":"a"', "unknown_type"),
        (b'{"type":"tool_call","agent_id":" \\u00a0\\ufeff"', "blank_agent_id"),
        (b'{"type":"tool_call","agent_id":"a","params":NaN', "bad_json"),
    ],
)
def test_classification_does_not_depend_on_a_surrogate_elsewhere(record, reason, surrogate):
    assert reason_of(record + surrogate + b"}") == reason


def test_repeated_keys_last_wins_as_in_javascript():
    assert isinstance(decode_event(b'{"type":"tool_dance","agent_id":"a","type":"tool_result"}'), ToolResult)
    assert decode_event(b'{"type":"run_end","agent_id":"a","agent_id":"b"}').agent_id == "b"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "empty"),
        (b"", "empty"),
        (b"[" * 70 + b"]" * 70, "too_deep"),
        (b"[1,2]", "wrong_type"),
        (b'"x"', "wrong_type"),
        (b"\xef\xbb\xbf{}", "bad_json"),
        (b'{"type":"run_end","agent_id":"\xff"}', "bad_json"),
        (b'{"type":"run_end","agent_id":"a"} {}', "bad_json"),
        (b'{"type":"run_end","agent_id":"a",}', "bad_json"),
    ],
)
def test_other_reasons(raw, reason):
    assert reason_of(raw) == reason
    assert reason_of(b" " * (LIMIT_BYTES + 1)) == "too_large"


# ---------------------------------------------------------------- written back safely


def test_verdict_and_dead_letter_with_lone_surrogates_encode_as_escapes():
    v = Verdict(
        verdict_id="t:0:1:0",
        action="block",
        agent_id="a\ud800",
        tool_name="we\udc00b",
        message="Called we\udc00b",
        event_ts=None,
        ts=1.5,
    )
    out = encode_verdict(v)
    assert b"\\ud800" in out and b"\\udc00" in out
    back = json.loads(out)
    assert (back["agent_id"], back["tool_name"], back["message"]) == ("a\ud800", "we\udc00b", "Called we\udc00b")
    assert (
        encode_verdict(Verdict(verdict_id="x", action="allow", agent_id="a"))
        == b'{"type":"verdict","verdict_id":"x","action":"allow","agent_id":"a"}'
    )
    letter = json.loads(
        dead_letter_value(
            EventDecodeError("unknown_type", "unknown event type 'tool_\udbffcall'"), "t", 0, 5, b"\x00raw"
        )
    )
    assert letter["detail"] == "unknown event type 'tool_\udbffcall'"
    assert base64.b64decode(letter["raw"]) == b"\x00raw"


def test_run_key_is_utf8_and_state_key_stays_exact():
    a = decode_event(b'{"type":"run_end","agent_id":"a","run_id":"r\\ud800"}')
    b = decode_event(b'{"type":"run_end","agent_id":"a","run_id":"r\\ud801"}')
    assert run_key(a).encode() == "r\ufffd".encode()  # what a JavaScript producer's UTF-8 key holds
    assert state_key(a) != state_key(b)
    assert table_key(a) != table_key(b)
    assert decode_key(table_key(a)) == ("a", "a", "r\ud800")
    plain = decode_event(b'{"type":"run_end","agent_id":"a","run_id":"r"}')
    assert table_key(plain) == b'["a","a","r"]' and decode_key(table_key(plain)) == ("a", "a", "r")


# ---------------------------------------------------------------- the reasons table (schemas/WIRE.md)


def test_wire_lists_every_reason_once_with_an_example_that_gets_it():
    text = WIRE.read_text(encoding="utf-8")
    section = text.split("### Dead-letter reasons", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \| (.*?) \| `(.*)` \|$", section, re.M)
    assert [r[0] for r in rows] == list(DEAD_LETTER_REASONS)
    for reason, _, example in rows:
        if reason in ("unreadable", "empty", "too_large", "too_deep", "id_too_long", "misrouted", "engine_error"):
            continue  # not a short JSON line: described in the row
        assert reason_of(example.replace("\\|", "|").encode("utf-8")) == reason, reason


# ---------------------------------------------------------------- properties

TYPES = ("tool_call", "tool_result", "compaction_retry", "run_end")
any_text = st.text(max_size=8)  # lone surrogates included
ident = any_text.filter(lambda s: s.strip(JS_WHITESPACE) != "")
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | any_text
payloads = st.recursive(
    scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(any_text, c, max_size=3), max_leaves=8
)
optional_str = st.none() | any_text


@st.composite
def valid_events(draw) -> dict:
    body = {"type": draw(st.sampled_from(TYPES)), "agent_id": draw(ident)}
    for field in ("session_id", "run_id", "event_id"):
        if draw(st.booleans()):
            body[field] = draw(optional_str)
    if draw(st.booleans()):
        body["ts"] = draw(st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**60), 2**60))
    if body["type"] in ("tool_call", "tool_result"):
        for field in ("tool_name", "tool_call_id"):
            if draw(st.booleans()):
                body[field] = draw(optional_str)
        if draw(st.booleans()):
            body["params"] = draw(payloads)
    if body["type"] == "tool_call" and draw(st.booleans()):
        body["await_decision"] = draw(st.booleans())
    if body["type"] == "tool_result":
        for field in ("result", "error"):
            if draw(st.booleans()):
                body[field] = draw(payloads)
    if body["type"] == "compaction_retry" and draw(st.booleans()):
        body["reason"] = draw(optional_str)
    return body


def to_bytes(body) -> bytes:
    return json.dumps(body, ensure_ascii=True).encode()  # lone surrogates as \\udXXX escapes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_events())
def test_property_every_valid_event_decodes_as_sent(body):
    e = screen(to_bytes(body), LIMIT_BYTES, LIMIT_DEPTH)
    assert type(e).__struct_config__.tag == body["type"]
    for field in (
        "agent_id",
        "session_id",
        "run_id",
        "event_id",
        "tool_name",
        "tool_call_id",
        "reason",
        "await_decision",
    ):
        if field in body:
            assert getattr(e, field) == body[field], field
    if "ts" in body:
        assert e.ts == (None if body["ts"] is None else float(body["ts"]))
    for field in ("params", "result", "error"):
        if field in body:
            assert json.loads(bytes(getattr(e, field))) == body[field]
    run_key(e).encode()  # always a valid UTF-8 key
    table_key(e)


def _breakers(body: dict):
    """(mutated record, expected reason) pairs for one valid body."""
    no_type = {k: v for k, v in body.items() if k != "type"}
    no_agent = {k: v for k, v in body.items() if k != "agent_id"}
    yield no_type, "missing_field"
    yield {**body, "type": None}, "missing_field"
    yield no_agent, "missing_field"
    yield {**body, "agent_id": None}, "missing_field"
    yield {**body, "type": 3}, "wrong_type"
    yield {**body, "type": [body["type"]]}, "wrong_type"
    yield {**body, "agent_id": 3}, "wrong_type"
    yield {**body, "type": body["type"] + "\ud800"}, "unknown_type"
    yield {**body, "type": body["type"].upper()}, "unknown_type"
    yield {**body, "agent_id": " \u2028\ufeff"}, "blank_agent_id"
    yield {**body, "run_id": 1}, "wrong_type"
    yield {**body, "ts": "now"}, "wrong_type"
    yield [body], "wrong_type"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_events(), st.integers(min_value=1, max_value=10**6))
def test_property_every_invalid_event_is_rejected_with_its_reason(body, cut):
    for record, reason in _breakers(body):
        assert reason_of(to_bytes(record)) == reason, (record, reason)
    raw = to_bytes(body)
    assert reason_of(raw[: cut % len(raw)]) in ("bad_json", "empty")  # a strict prefix of an object


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.binary(max_size=64)
    | valid_events()
    .map(to_bytes)
    .flatmap(
        lambda raw: st.tuples(st.just(raw), st.integers(0, len(raw)), st.binary(max_size=4)).map(
            lambda t: t[0][: t[1]] + t[2] + t[0][t[1] :]
        )
    )
)
def test_property_nothing_but_event_decode_error_escapes(raw):
    try:
        screen(raw, LIMIT_BYTES, LIMIT_DEPTH)
    except EventDecodeError as exc:
        assert exc.reason in DEAD_LETTER_REASONS


def test_run_state_with_lone_surrogates_round_trips_through_the_table_codec():
    from loopwarden.detection.state import RunState
    from loopwarden.worker.runcodec import RunValue, decode_value, encode_value

    state = RunState(buckets={"generic:we\udc00b:x": 1}, blocked=["c\ud800"])
    state.history.push("we\udc00b", "we\udc00b:x", "c\ud801", None, None, 30)
    odd = RunValue(offset=7, touched=1.5, state=state)
    assert decode_value(encode_value(odd)) == odd
    plain = RunValue(offset=7, touched=1.5, state=RunState(buckets={"k\u00e9": 1}))
    raw = encode_value(plain)
    assert (
        raw[1:2] != b"\x00" and decode_value(raw) == plain
    )  # normal states keep the plain encoding (after the version byte)
