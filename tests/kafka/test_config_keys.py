"""The config feed (worker and runner) skips what it cannot apply, counted, and goes on."""

from __future__ import annotations

from loopwarden.kafka.configfeed import ConfigFeed
from loopwarden.kafka.records import UNREADABLE
from loopwarden.schemas.config import FleetConfig
from loopwarden.schemas.events import MAX_ID_CHARS

BLOCK = b'{"warningThreshold": 4}'


def feed() -> ConfigFeed:
    return ConfigFeed(FleetConfig(), "127.0.0.1:1", "cfg")


def test_a_key_longer_than_an_agent_id_is_refused_and_not_kept():
    f = feed()
    assert not f.apply(b"k" * 900_000, BLOCK)  # 200 of these cost +176 MiB on every worker and runner
    assert not f.apply("é".encode() * (MAX_ID_CHARS + 1), BLOCK)  # the cap is in characters, as agent ids'
    assert f.refused == {"key_too_long": 2}
    assert f.apply(b"a" * MAX_ID_CHARS, BLOCK)  # the longest agent id still gets its override
    assert f.fleet.resolve("a" * MAX_ID_CHARS).warning_threshold == 4


def test_nesting_past_the_recursion_bound_is_refused_not_raised():
    f = feed()
    assert not f.apply(b"*", b"[" * 1000 + b"]" * 1000)  # raised RecursionError: every worker exited at start
    assert not f.apply(b"*", b'{"tools": {"loopDetection": ' + b"[" * 900 + b"]" * 900 + b"}}")
    assert f.refused == {"bad_record": 2}
    assert f.apply(b"*", BLOCK)


def test_the_mark_of_an_unreadable_record_is_counted():
    f = feed()
    assert not f.apply(None, None, [(UNREADABLE, b"UnicodeDecodeError")])
    assert f.refused == {"unreadable": 1}
