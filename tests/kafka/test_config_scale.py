"""Config records at fleet scale (issue 23): each applied in O(1), a cap on agents with overrides,
deletes give the config file's blocks back, and the per-agent caches grow with the config only."""

from __future__ import annotations

import json

import pytest

from loopwarden.kafka.configfeed import ConfigFeed
from loopwarden.schemas import config as config_module
from loopwarden.schemas.config import FleetConfig

FILE = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 4}},
    "loopwarden": {"shadow": True},
    "agents": {"list": [{"id": "coder", "tools": {"loopDetection": {"historySize": 7}}}]},
}


def feed() -> ConfigFeed:
    return ConfigFeed(FleetConfig.from_document(FILE), "127.0.0.1:1", "t")


def test_a_star_tombstone_gives_the_file_global_block_back():
    """Issue 23: a tombstone for ``*`` left detection off instead of restoring the file's global block."""
    f = feed()
    assert f.apply(b"*", b'{"tools": {"loopDetection": {"enabled": false}}, "loopwarden": {"shadow": false}}')
    assert not f.fleet.resolve("any").enabled and not f.fleet.extensions("any").shadow
    assert f.apply(b"*", None)
    assert f.fleet.resolve("any").enabled and f.fleet.resolve("any").warning_threshold == 4
    assert f.fleet.extensions("any").shadow is True
    assert f.fleet.resolve("coder").history_size == 7  # the agents' blocks lie over it again


def test_an_agent_tombstone_gives_the_file_agent_block_back():
    f = feed()
    assert f.apply(b"coder", b'{"historySize": 3}')
    assert f.fleet.resolve("Coder").history_size == 3
    assert f.apply(b"coder", None)
    assert f.fleet.resolve("coder").history_size == 7
    assert f.apply(b"other", b'{"historySize": 9}') and f.apply(b"other", None)
    assert f.fleet.resolve("other") is f.fleet.resolve("nobody")


def test_the_feed_does_not_change_the_base_it_was_given():
    base = FleetConfig.from_document(FILE)
    f = ConfigFeed(base, "127.0.0.1:1", "t")
    f.apply(b"x", b'{"historySize": 3}')
    assert f.fleet.resolve("x").history_size == 3 and base.resolve("x").history_size == 30


def test_each_record_touches_its_agent_only(monkeypatch):
    """Issue 23: every record rebuilt the whole per-agent map (a normalization per agent per record:
    12,000 records stalled the loop 35 s). Counted work: normalizations grow with the records, not
    with records times agents."""
    calls = 0
    normalize = config_module.normalize_agent_id

    def counting(agent_id):
        nonlocal calls
        calls += 1
        return normalize(agent_id)

    monkeypatch.setattr(config_module, "normalize_agent_id", counting)
    f = ConfigFeed(FleetConfig(), "127.0.0.1:1", "t")
    calls = 0
    for i in range(2000):
        f.apply(f"agent-{i}".encode(), json.dumps({"enabled": True, "historySize": 10 + i % 50}).encode())
    assert calls <= 2 * 2000  # the old rebuild: about 2,000,000
    assert f.fleet.resolve("agent-1999").history_size == 10 + 1999 % 50


def test_overrides_beyond_the_cap_are_ignored_and_counted(monkeypatch):
    monkeypatch.setattr(config_module, "MAX_AGENT_OVERRIDES", 3)
    ignored: list[int] = []
    f = ConfigFeed(FleetConfig(), "127.0.0.1:1", "t", on_ignored=lambda: ignored.append(1))
    assert all(f.apply(f"a{i}".encode(), b'{"historySize": 5}') for i in range(3))
    assert not f.apply(b"a3", b'{"historySize": 5}')
    assert f.fleet.resolve("a3").history_size == 30 and (f.ignored, len(ignored)) == (1, 1)
    assert f.apply(b"a1", b'{"historySize": 6}')  # an agent already overridden still updates
    assert f.apply(b"a0", None) and f.apply(b"a3", b'{"historySize": 5}')  # a delete frees a place
    assert f.fleet.resolve("a3").history_size == 5


@pytest.mark.parametrize("with_blocks", [False, True])
def test_per_agent_caches_do_not_grow_with_the_agent_ids_seen(with_blocks):
    """Issue 23: the caches kept every distinct agent_id (200 events with 500 KB ids: RSS 26 to 198 MiB)."""
    doc = dict(FILE) if with_blocks else {"tools": FILE["tools"], "loopwarden": {"shadow": True}}
    fleet = FleetConfig.from_document(doc)
    for i in range(5000):
        fleet.resolve(f"agent-{i}" * 20)
        fleet.extensions(f"agent-{i}" * 20)
    assert len(fleet._cache) <= 1 and len(fleet._ext_cache) <= 1


def test_fleet_wide_follows_single_agent_updates():
    fleet = FleetConfig()
    assert not fleet.fleet_wide()
    fleet.set_override("a", None, {"incidents": {"enabled": True}})
    assert fleet.fleet_wide()
    fleet.set_override("a", None, delete=True)
    assert not fleet.fleet_wide()
    fleet.set_override("*", None, {"crossRun": {"enabled": True}})
    fleet.set_override("b", None, {"crossRun": {"enabled": False}})
    assert fleet.fleet_wide()  # every agent but b


def test_observed_extensions_follow_live_overrides_and_stay_shared():
    from types import SimpleNamespace

    fleet = FleetConfig.from_document({"loopwarden": {"escalation": {"afterBlocks": 2}}})
    span = SimpleNamespace(agent_id="a", origin="otel")
    first = fleet.extensions_of(span)
    assert first.shadow is True and first.escalation.after_blocks == 2
    for i in range(1000):  # agents without a block of their own share one observed value
        assert fleet.extensions_of(SimpleNamespace(agent_id=f"agent-{i}", origin="otel")) is first
    fleet.set_override("a", None, {"escalation": {"afterBlocks": 5}})
    assert fleet.extensions_of(span).escalation.after_blocks == 5 and fleet.extensions_of(span).shadow is True
    assert len(fleet._observed_cache) <= 2
    fleet.set_override("a", None, delete=True)
    assert fleet.extensions_of(span) is first
