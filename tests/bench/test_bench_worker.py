"""``bench worker --fleet`` / ``--config``: which configs one run measures, and their ratios (no timing asserted)."""

import argparse
import json

from loopwarden.bench.worker import BENCH_CONFIG, FLEET_BENCH_CONFIG, add_arguments, configs, versus
from loopwarden.schemas.config import FleetConfig


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


def test_without_options_one_default_run():
    assert configs(parse()) == [("default", None)]


def test_fleet_compares_the_default_with_the_extensions_on(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"loopwarden": {"crossRun": {"enabled": True}}}))
    got = configs(parse("--fleet", "--config", str(path)))
    assert [label for label, _ in got] == ["default", "fleet extensions", str(path)]
    assert got[0][1] == BENCH_CONFIG and got[2][1] == {"loopwarden": {"crossRun": {"enabled": True}}}
    ext = FleetConfig.from_document(got[1][1]).extensions("any-agent")
    assert ext.incidents.enabled and ext.incidents.block and ext.cross_run.enabled
    # the detection settings are the default run's: only the extensions differ
    assert FleetConfig.from_document(FLEET_BENCH_CONFIG).resolve("a") == FleetConfig.from_document(
        BENCH_CONFIG
    ).resolve("a")


def test_worker_flags_after_the_double_dash_stay_apart():
    args = parse("--fleet", "--", "--batch-size", "500")
    assert args.fleet and [a for a in args.worker_args if a != "--"] == ["--batch-size", "500"]


def test_ratios_are_to_the_first_config():
    base = {"worker_events_per_s": 10_000, "worker_cpu_us_per_event": 60.0}
    other = {"worker_events_per_s": 5_000, "worker_cpu_us_per_event": 150.0}
    assert versus(base, other) == {"events_per_s": 0.5, "cpu_us_per_event": 2.5}


def test_medians_of_repeated_runs():
    from loopwarden.bench.worker import medians

    runs = [{"worker_events_per_s": v, "worker_cpu_us_per_event": c} for v, c in ((9, 70.0), (3, 200.0), (10, 60.0))]
    assert medians(runs) == {"worker_events_per_s": 9, "worker_cpu_us_per_event": 70.0}


def test_p99_by_quarter_follows_the_window_in_time_order():
    from loopwarden.bench.worker import p99_by_quarter

    # 400 events over 4 s whose latency climbs by quarter (as on a Tansu filling up), shuffled by arrival.
    points = [(100.0 + i / 100, (10 + 10 * (i // 100) + i % 7) / 1000) for i in range(400)]
    points.reverse()
    assert p99_by_quarter(points) == [16.0, 26.0, 36.0, 46.0]
    assert p99_by_quarter([(5.0, 0.003)]) == [3.0, 0.0, 0.0, 0.0]  # one point: the first quarter only
