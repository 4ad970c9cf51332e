"""The bounded map whose live entries go last (streams/runner/tables.py)."""

from __future__ import annotations

from loopwarden.runner.tables import LiveLRU


def test_plain_entries_go_first_and_live_ones_past_their_share():
    m: LiveLRU[str, int] = LiveLRU(4)  # live share: 2
    m.put("live", 0)
    m.mark_live("live")
    evicted = [k for i in range(10) for k, _ in m.put(f"p{i}", i)]
    assert evicted == [f"p{i}" for i in range(7)] and "live" in m and m.live == 1
    m.put("l2", 1)
    m.mark_live("l2")
    m.put("l3", 2)
    assert [k for k, _ in m.mark_live("l3")] == ["live"]  # three live past a share of two: the oldest
    assert m.live == 2 and len(m) == 3  # l2, l3 and p9


def test_bytes_are_a_bound_too_and_an_entry_alone_over_it_goes():
    m: LiveLRU[str, str] = LiveLRU(100, max_bytes=1000)
    for i in range(5):
        m.put(f"k{i}", "v", 300)
    assert len(m) == 3 and m.bytes == 900
    m.pop("k4")
    assert m.bytes == 600
    assert [k for k, _ in m.put("huge", "v", 5000)] == ["k2", "k3", "huge"]
    assert len(m) == 0 and m.bytes == 0
