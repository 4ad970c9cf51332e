"""``bench failover``: its arguments, the events of a fill, and the table it prints (no timing asserted)."""

from __future__ import annotations

import argparse

import pytest

from loopwarden.bench.failover import add_arguments, bench_failover, fill_events, table


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


def test_defaults_two_sizes_with_and_without_standbys_every_scenario():
    args = parse()
    assert args.runs == [2000, 20000] and args.standbys == [1, 0]
    assert args.scenarios == "kill,restart,wipe" and not args.instance_ids


def test_lists_static_membership_and_worker_flags():
    args = parse("--runs", "500,5000", "--standbys", "0", "--instance-ids", "--", "--fetch-wait-ms", "20")
    assert args.runs == [500, 5000] and args.standbys == [0] and args.instance_ids
    assert [a for a in args.worker_args if a != "--"] == ["--fetch-wait-ms", "20"]


def test_an_unknown_scenario_is_refused_before_anything_starts():
    with pytest.raises(SystemExit, match="drain"):
        bench_failover(parse("--scenarios", "kill,drain"))


def test_a_fill_is_runs_of_two_distinct_calls_with_results():
    events = list(fill_events(3))
    assert len(events) == 12 and len({e["run_id"] for e in events}) == 3
    calls = [e for e in events if e["type"] == "tool_call"]
    assert len({(e["run_id"], str(e["params"])) for e in calls}) == 6  # never a repeat: no verdicts, only state


def test_the_table_has_a_row_per_size_standbys_and_scenario():
    window = {"verdicts": 10, "p50_ms": 10.0, "p99_ms": 40.4, "max_ms": 52.0}
    report = {
        "groups": [
            {
                "runs": 20000,
                "standby_replicas": 0,
                "kill": {"ready_s": 21.26, "survivor_partitions": window, "moved_partitions": {"verdicts": 0}},
                "restart": {"ready_s": None, "survivor_partitions": window, "moved_partitions": window},
            }
        ]
    }
    rows = table(report).splitlines()
    assert rows[2] == "| 20,000 | 0 | kill | 21.3 | 40 / 52 | - |"
    assert rows[3] == "| 20,000 | 0 | restart | - | 40 / 52 | 40 / 52 |"
    assert len(rows) == 4
