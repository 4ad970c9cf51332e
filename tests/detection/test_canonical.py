"""Spec §2 (canonical serialization, digests) and §13.4 (JS numbers and strings)."""

from __future__ import annotations

import decimal
import json
import math
import random
import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from loopwarden.detection.canonical import UNDEFINED, canonical, canonical_slow, digest, js_number, js_string
from loopwarden.detection.hashing import args_hash
from loopwarden.schemas.events import decode_event
from tests.support.helpers import js_loads, sha

LONG_EXAMPLE_JSON = (
    '{"type":"tool_call","agent_id":"a","tool_name":"read","params":'
    '{"path":"/workspace/data/events.ndjson","offset":-0.0,"limit":50.0,'
    '"accountId":12345678901234567890,"filter":{"minScore":1e-7,"level":"error"}}}'
)
LONG_EXAMPLE_CANONICAL = (
    '{"accountId":12345678901234567000,"filter":{"level":"error","minScore":1e-7},"limit":50,'
    '"offset":0,"path":"/workspace/data/events.ndjson"}'
)


def params_of(event_json: str):
    """The params of a tool_call decoded from JSON text through the project's decoder."""
    ev = decode_event(event_json)
    params = ev.params
    if not isinstance(params, (dict, list, str, int, float, bool, type(None))):
        params = js_loads(bytes(params))  # msgspec.Raw payload
    return params


def both(value) -> str:
    fast, slow = canonical(value), canonical_slow(value)
    assert fast == slow, (fast, slow)
    return fast


# ---------------------------------------------------------------- §2.8 the three digests


def test_rule_2_8_digest_of_empty_object():
    p = params_of('{"type":"tool_call","agent_id":"a","tool_name":"read","params":{}}')
    assert both(p) == "{}"
    assert args_hash("read", p) == "read:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    assert args_hash("read", p).startswith("read:44136fa3")


def test_rule_2_8_digest_of_null_member():
    p = params_of('{"type":"tool_call","agent_id":"a","tool_name":"read","params":{"a":null}}')
    assert both(p) == '{"a":null}'
    assert args_hash("read", p) == "read:d091f9c83c091f79652fe8786375b3fe4ce0861a56f5bfbafedbe431877ff0e8"


def test_rule_2_8_long_example_byte_for_byte():
    p = params_of(LONG_EXAMPLE_JSON)
    assert canonical(p) == LONG_EXAMPLE_CANONICAL
    assert canonical_slow(p) == LONG_EXAMPLE_CANONICAL
    assert args_hash("read", p) == "read:ddff5992ddd4b7263543bbac8cb9f64513adb2c40cb909156dd092fce38e55fa"


def test_rule_2_8_digest_is_lowercase_hex_sha256_of_utf8():
    value = {"é": "☃", "n": 1}
    expected = sha('{"n":1,"é":"☃"}')
    assert digest(value) == expected
    assert digest(value) == digest(value).lower() and len(digest(value)) == 64


# ---------------------------------------------------------------- §2.1 null / undefined


def test_rule_2_1_null_and_undefined_token_key_kept():
    assert both(None) == "null"
    assert both({"status": UNDEFINED, "a": 1}) == '{"a":1,"status":undefined}'
    assert both([UNDEFINED]) == "[undefined]"


# ---------------------------------------------------------------- §2.2 strings


@pytest.mark.parametrize(
    "text, expected",
    [
        ("plain", '"plain"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("\b\f\n\r\t", '"\\b\\f\\n\\r\\t"'),
        ("\x00\x01\x1f", '"\\u0000\\u0001\\u001f"'),
        ("\x0b\x1a\x1b", '"\\u000b\\u001a\\u001b"'),  # lowercase hex
        ("\x7f", '"\x7f"'),
        ("\u2028\u2029", '"\u2028\u2029"'),
        ("héllo wörld ✓ 日本", '"héllo wörld ✓ 日本"'),
        ("emoji 😀 👍🏽", '"emoji 😀 👍🏽"'),
        ("/path/to", '"/path/to"'),  # no escaping of /
        ("<script>&'", '"<script>&\'"'),
        ("a\ud800b", '"ab"'),  # unpaired high surrogate removed
        ("\udc00", '""'),  # unpaired low surrogate removed
        ("x\ude00\ud83dy", '"xy"'),  # reversed pair is two unpaired surrogates
        ("\ud83d\ude00", '"😀"'),  # a proper pair written as two code points is one character
    ],
)
def test_rule_2_2_string_escaping(text, expected):
    assert js_string(text) == expected
    assert canonical_slow(text) == expected
    assert canonical(text) == expected


def test_rule_2_2_escaping_in_keys():
    assert both({"a\nb": 1, 'q"': 2}) == '{"a\\nb":1,"q\\"":2}'
    assert canonical_slow({"k\ud800": 1}) == '{"k":1}'


def test_rule_2_2_decoded_lone_surrogate_escape_removed():
    p = params_of('{"type":"tool_call","agent_id":"a","tool_name":"t","params":{"a":"x\\ud800y","b":"\\ud83d\\ude00"}}')
    assert canonical(p) == '{"a":"xy","b":"😀"}'


# ---------------------------------------------------------------- §2.3 numbers

JS_STRING_TABLE = [
    (50.0, "50"),
    (-0.0, "0"),
    (0.0, "0"),
    (1e-7, "1e-7"),
    (1.5e-7, "1.5e-7"),
    (5e-7, "5e-7"),
    (1e21, "1e+21"),
    (-1e21, "-1e+21"),
    (1.2e21, "1.2e+21"),
    (1e20, "100000000000000000000"),
    (9.999999999999999e20, "999999999999999900000"),
    (1e16, "10000000000000000"),
    (0.000001, "0.000001"),
    (0.0000012345, "0.0000012345"),
    (2.5e-5, "0.000025"),
    (1.5e300, "1.5e+300"),
    (1e301, "1e+301"),
    (123.456, "123.456"),
    (123456789.123, "123456789.123"),
    (0.1, "0.1"),
    (0.1 + 0.2, "0.30000000000000004"),
    (1 / 3, "0.3333333333333333"),
    (-1.5, "-1.5"),
    (4.35, "4.35"),
    (100.0, "100"),
    (1.23e-18, "1.23e-18"),
    (5e-324, "5e-324"),
    (-5e-324, "-5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
    (2.0**53, "9007199254740992"),
    (2**53, "9007199254740992"),
    (2**53 + 1, "9007199254740992"),
    (2**64, "18446744073709552000"),
    (12345678901234567890, "12345678901234567000"),
    (123456789012345678901234567890, "1.2345678901234568e+29"),
    (-(2**53) - 1, "-9007199254740992"),
    (0, "0"),
    (-7, "-7"),
    (1, "1"),
    (float("nan"), "NaN"),
    (float("inf"), "Infinity"),
    (float("-inf"), "-Infinity"),
]


@pytest.mark.parametrize("value, expected", JS_STRING_TABLE, ids=[repr(v) for v, _ in JS_STRING_TABLE])
def test_rule_2_3_js_number_table(value, expected):
    assert js_number(value) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("50.0", "50"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("1e-7", "1e-7"),
        ("1E-7", "1e-7"),
        ("1e21", "1e+21"),
        ("1e20", "100000000000000000000"),
        ("0.000001", "0.000001"),
        ("1.5e300", "1.5e+300"),
        ("123.456", "123.456"),
        ("0.1", "0.1"),
        ("9007199254740993", "9007199254740992"),
        ("5e-324", "5e-324"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ("12345678901234567890", "12345678901234567000"),
        ("100e-2", "1"),
        ("1.0e2", "100"),
        ("0.5e1", "5"),
        ("18446744073709551616", "18446744073709552000"),
    ],
)
def test_rule_2_3_numbers_decoded_from_json_text(text, expected):
    p = params_of('{"type":"tool_call","agent_id":"a","tool_name":"t","params":{"n":%s}}' % text)
    assert canonical(p) == '{"n":%s}' % expected
    assert canonical_slow(p) == '{"n":%s}' % expected


def test_rule_2_3_non_finite_numbers_become_quoted_strings():
    assert canonical_slow(float("nan")) == '"NaN"'
    assert canonical_slow([float("inf"), float("-inf")]) == '["Infinity","-Infinity"]'


def test_rule_2_3_overflowing_json_number_is_infinity_and_serializes_quoted():
    # JSON.parse("1e400") is Infinity (an IEEE double); §2.3 prints non-finite numbers as quoted strings.
    p = params_of('{"type":"tool_call","agent_id":"a","tool_name":"t","params":{"n":1e400}}')
    assert canonical_slow(p) == '{"n":"Infinity"}'
    assert canonical(p) == '{"n":"Infinity"}'


def test_rule_2_3_plain_python_floats_print_the_javascript_way():
    # canonical() is public API; a float that did not come through the JSON hook must still print as JS does.
    assert canonical({"limit": 50.0, "z": -0.0}) == '{"limit":50,"z":0}'
    assert digest({"limit": 50.0}) == digest({"limit": 50})


# ---------------------------------------------------------------- §2.4 / §2.5


def test_rule_2_4_booleans():
    assert both(True) == "true" and both(False) == "false"
    assert both({"t": True, "f": False}) == '{"f":false,"t":true}'


def test_rule_2_5_arrays_in_order_no_whitespace():
    assert both([3, 1, [2, {"b": 1, "a": [None]}], "x"]) == '[3,1,[2,{"a":[null],"b":1}],"x"]'
    assert both([]) == "[]"


# ---------------------------------------------------------------- §2.6 objects


def test_rule_2_6_keys_sorted_ascii():
    assert (
        both({"b": 1, "a": 2, "B": 3, "aa": 4, "10": 5, "9": 6, "": 7})
        == '{"":7,"10":5,"9":6,"B":3,"a":2,"aa":4,"b":1}'
    )


def test_rule_2_6_keys_sorted_by_utf16_code_units_not_code_points():
    # U+1F600 is D83D DE00 in UTF-16: it sorts BEFORE U+E000 and U+FFFD (code-point order would put it last).
    value = {"\ufffd": 3, "\ue000": 2, "😀": 1, "z": 0}
    assert both(value) == '{"z":0,"😀":1,"\ue000":2,"\ufffd":3}'


def test_rule_2_6_utf16_order_for_decoded_keys():
    p = params_of(
        '{"type":"tool_call","agent_id":"a","tool_name":"t","params":{"\\ufffd":1,"\\ud83d\\ude00":2,"\\uff41":3}}'
    )
    assert canonical(p) == '{"😀":2,"ａ":3,"\ufffd":1}'


def test_rule_2_6_nested_objects_sorted_and_key_order_irrelevant():
    a = {"x": {"d": 1, "c": [{"f": 1, "e": 2}]}, "a": None}
    b = {"a": None, "x": {"c": [{"e": 2, "f": 1}], "d": 1}}
    assert both(a) == both(b) == '{"a":null,"x":{"c":[{"e":2,"f":1}],"d":1}}'


# ---------------------------------------------------------------- §2.7


def test_rule_2_7_repeated_reference_not_on_path_is_serialized_in_full():
    shared = {"k": 1}
    assert both([shared, shared, {"again": shared}]) == '[{"k":1},{"k":1},{"again":{"k":1}}]'


# ---------------------------------------------------------------- fast path == slow path on decoded JSON


@pytest.mark.parametrize(
    "params_json",
    [
        '{"a":1,"b":[1.5,-0,2e-7,1e21,1e+300],"c":{"\\u00e9":"\\u2028","\\ud83d\\ude00":null}}',
        '{"big":[9007199254740993,12345678901234567890,-98765432109876543210],"s":"1234567890123456789"}',
        '{"ctrl":"\\u0000\\u001f\\u007f\\b","q":"\\"\\\\","emoji":"\\ud83d\\ude00","bmp":"\\uffff"}',
        '[{"\\ue000":1,"\\ud83d\\ude00":2},{"b":true,"a":false}]',
        '{"f":[0.1,0.2,0.30000000000000004,123456789012345.6,1e-6,1e-7]}',
    ],
)
def test_rule_2_fast_path_equals_slow_path_on_decoded_json(params_json):
    p = params_of('{"type":"tool_call","agent_id":"a","tool_name":"t","params":%s}' % params_json)
    assert canonical(p) == canonical_slow(p)
    assert digest(p) == sha(canonical_slow(p))


# ---------------------------------------------------------------- hypothesis properties


def js_reference(x: float) -> str:
    """ECMAScript Number::toString(x) written from the spec text, digits from repr()."""
    if math.isnan(x):
        return "NaN"
    if x == 0:
        return "0"
    if x < 0:
        return "-" + js_reference(-x)
    if math.isinf(x):
        return "Infinity"
    # repr gives the shortest round-tripping decimal; Decimal splits it into digits and exponent.
    sign, digits, exponent = decimal.Decimal(repr(x)).normalize().as_tuple()
    s = "".join(map(str, digits))
    k = len(s)
    n = exponent + k  # x = 0.s * 10**n  ->  s * 10**(n-k)
    if k <= n <= 21:
        return s + "0" * (n - k)
    if 0 < n <= 21:
        return s[:n] + "." + s[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + s
    e = n - 1
    mant = s[0] + ("." + s[1:] if k > 1 else "")
    return mant + "e" + ("+" if e >= 0 else "-") + str(abs(e))


def test_js_reference_matches_known_table():
    for value, expected in JS_STRING_TABLE:
        if isinstance(value, float):
            assert js_reference(value) == expected, value


@settings(max_examples=800, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_property_js_number_matches_ecmascript_reference(x):
    assert js_number(x) == js_reference(x)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=2**64 - 1).map(lambda b: struct.unpack("<d", struct.pack("<Q", b))[0]))
def test_property_js_number_random_bit_patterns(x):
    assume(math.isfinite(x))
    assert js_number(x) == js_reference(x)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_property_js_number_integers_round_to_doubles(n):
    assert js_number(n) == js_reference(float(n))


json_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | json_text
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(json_text, children, max_size=5),
    max_leaves=15,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(json_text, json_scalars | st.lists(json_scalars, max_size=3), min_size=1, max_size=8),
    st.randoms(use_true_random=False),
)
def test_property_key_order_irrelevant(value, rnd: random.Random):
    items = list(value.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    assert canonical(shuffled) == canonical(value)
    assert canonical_slow(shuffled) == canonical_slow(value)
    assert digest(shuffled) == digest(value)


def _js_equal(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_js_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_js_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or a is None or isinstance(a, str):
        return a == b and type(a) is type(b)
    return float(a) == float(b)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_property_round_trip_parses_back_to_equal_value(value):
    text = canonical_slow(value)
    assert _js_equal(json.loads(text), value)
    assert _js_equal(json.loads(canonical(value)), value)


any_json_text = st.text(max_size=12)  # may contain lone surrogates (JSON allows "\ud800" escapes)
any_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | any_json_text
)
any_values = st.recursive(
    any_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(any_json_text, children, max_size=5),
    max_leaves=15,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_values, st.booleans())
def test_property_fast_path_equals_slow_path_through_project_decoder(value, ascii_only):
    text = json.dumps(value, ensure_ascii=True) if ascii_only else json.dumps(value, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, ensure_ascii=True)
    p = params_of('{"type":"tool_call","agent_id":"a","tool_name":"t","params":%s}' % text)
    assert canonical(p) == canonical_slow(p)
    assert digest(p) == sha(canonical_slow(p))
    assert not any("\ud800" <= ch <= "\udfff" for ch in canonical(p))  # lone surrogates are gone


def test_rule_2_3_duplicate_json_keys_last_wins():
    p = params_of('{"type":"tool_call","agent_id":"a","tool_name":"t","params":{"a":1,"b":2,"a":3}}')
    assert canonical(p) == '{"a":3,"b":2}'


def test_rule_2_3_negative_overflow_is_minus_infinity():
    p = params_of('{"type":"tool_call","agent_id":"a","tool_name":"t","params":[-1e400]}')
    assert canonical(p) == '["-Infinity"]'
