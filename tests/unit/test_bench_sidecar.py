"""``bench sidecar`` reports percentiles in ms, the late count, and the service's added time (no timing asserted)."""

from loopwarden.bench.sidecar import summary, table


def test_summary_is_in_milliseconds_with_the_rate():
    s = summary([0.001 * i for i in range(1, 101)], seconds=2.0, late=3)
    assert (s["checks"], s["p50_ms"], s["p99_ms"], s["max_ms"], s["checks_per_s"], s["late"]) == (
        100,
        50.0,
        99.0,
        100.0,
        50.0,
        3,
    )


def test_table_names_every_way_and_the_added_time():
    level = summary([0.0002, 0.0004], 1.0)
    report = {
        "load_before": (0.5, 0, 0),
        "load_after": (0.7, 0, 0),
        "cpus": 2,
        **{way: {"sequential": level, "paced": level} for way in ("in_process", "tcp", "unix")},
        "added_ms": {"tcp_sequential": {"p50_ms": 0.1, "p99_ms": 0.2}},
    }
    text = table(report)
    assert "load average before 0.50, after 0.70" in text and "service adds (tcp_sequential): p50 0.100" in text
    assert all(way in text for way in ("in_process", "tcp", "unix"))
