"""``loopwarden tune``: counts from the engine's own step(), checked against replay and by hand."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from loopwarden.devtools.synthetic import fleet_events
from loopwarden.replay import BadLine, replay_lines
from loopwarden.schemas.config import FleetConfig, load_config
from loopwarden.tune import grid, memo_room, parse_sweep, prepare, tune

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"


def synthetic(n_agents=15):
    return [msgspec.json.encode(e) for e in fleet_events(agents=n_agents, runs_per_agent=4, loop_share=0.5, seed=11)]


def replay_counts(lines, fleet):
    """Runs per action from replay's rows (the reference the tune counts must agree with)."""
    runs = {"warn": set(), "block": set(), "abort": set()}
    cut = 0
    for r in replay_lines(lines, fleet):
        if isinstance(r, BadLine) or (r["action"] == "warn" and not r["emitted"]):
            continue
        runs[r["action"]].add((r["agent_id"], r["session_id"], r["run_id"]))
        cut += r["action"] == "block"
    return len(runs["warn"]), len(runs["block"]), len(runs["abort"]), cut


@pytest.mark.parametrize("threshold", [3, 6, 10])
def test_sweep_counts_agree_with_replay_under_each_setting(threshold):
    lines = synthetic()
    base = {"tools": {"loopDetection": {"enabled": True}}}
    report = tune(prepare(lines), FleetConfig.from_document(base), grid([("warningThreshold", [threshold, 12])]))
    setting = report.settings[0]
    assert setting.knobs == {"warningThreshold": threshold}
    fleet = FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True, "warningThreshold": threshold}}})
    f = setting.fleet
    assert (f.warned, f.blocked, f.aborted, f.cut_calls) == replay_counts(lines, fleet)
    assert f.blocked > 0 and report.runs == 60


def test_skipping_runs_nothing_can_fire_in_changes_nothing():
    lines = synthetic()
    prep = prepare(lines)
    assert 0 < len(prep.active) < len(prep.events)
    everything = prep._replace(active=list(range(len(prep.events))))
    fleet = FleetConfig.from_document({"tools": {"loopDetection": {"enabled": True}}})
    points = grid([("warningThreshold", [2, 5]), ("historySize", [5, 30])])
    with memo_room():
        assert tune(prep, fleet, points).settings == tune(everything, fleet, points).settings


def test_fleet_trace_by_hand():
    # tests/data/fleet.jsonl under fleet.config.json5 (see tests/data/README.md): blocks for coder r1 (generic,
    # call 4, and its retry), coder's ping-pong run, POLLER (global breaker), builder (known poll), unknown tool,
    # clamped (generic at its 5th call); warnings never reach the bucket of 10, so none is shown.
    prep = prepare((DATA / "fleet.jsonl").read_bytes().splitlines())
    setting = tune(prep, load_config(DATA / "fleet.config.json5"), grid([])).settings[0]
    assert {d: c.blocked for d, c in setting.by_detector.items()} == {
        "generic_repeat": 2,
        "global_circuit_breaker": 1,
        "known_poll_no_progress": 1,
        "ping_pong": 1,
        "unknown_tool_repeat": 1,
    }
    assert setting.fleet.warned == 0 and setting.fleet.aborted == 0
    assert setting.by_detector["generic_repeat"].cut_calls == 3  # r1's block and retry, clamped's block
    assert setting.by_agent["clamped"].first_block_call == 5


def test_usage_totals_in_tune_match_the_engine_fixture():
    from tests.detection.test_loop_cost import LOW, loop_trace

    prep = prepare([json.dumps(e) for e in loop_trace()])
    setting = tune(prep, FleetConfig.from_document(LOW), grid([])).settings[0]
    g = setting.by_detector["generic_repeat"]
    assert (g.blocked, g.cut_calls, g.cut_tokens, g.loop_tokens) == (1, 2, 140 + 55, 360 + 140 + 55 + 1001)
    assert g.loop_cost == pytest.approx(0.135)
    assert (g.first_warn_call, g.first_block_call) == (None, 4)  # the count-2 warning is below the bucket


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("warningThreshold=5:8", ("warningThreshold", [5, 6, 7, 8])),
        ("criticalThreshold=10:40:10", ("criticalThreshold", [10, 20, 30, 40])),
        ("postCompactionGuard.windowSize=2,4", ("postCompactionGuard.windowSize", [2, 4])),
    ],
)
def test_parse_sweep(spec, expected):
    assert parse_sweep(spec) == expected


@pytest.mark.parametrize(
    "spec", ["enabled=1:2", "warningThreshold", "warningThreshold=a:b", "historySize=5:1", "historySize=1:5:0"]
)
def test_parse_sweep_rejects(spec):
    with pytest.raises(ValueError):
        parse_sweep(spec)


def test_guard_window_knob_reaches_the_guard():
    prep = prepare((DATA / "guard.jsonl").read_bytes().splitlines())
    report = tune(prep, FleetConfig(), grid([("postCompactionGuard.windowSize", [3, 50])]))
    assert report.settings[0].fleet.aborted > 0 and report.settings[1].fleet.aborted == 0


def test_cli_json_and_plot(tmp_path, capsys):
    from loopwarden.cli import main

    png = tmp_path / "sweep.png"
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(b"\n".join(synthetic(6)))
    assert (
        main(
            [
                "tune",
                str(tmp_path),
                "--config",
                str(DATA / "enabled.config.json"),
                "--json",
                "--sweep",
                "warningThreshold=4:6",
                "criticalThreshold=20,30",
                "--plot",
                str(png),
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert [s["knobs"] for s in report["settings"]] == [
        {"warningThreshold": w, "criticalThreshold": c} for w in (4, 5, 6) for c in (20, 30)
    ]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["tune", str(trace), "--sweep", "nope=1:2"]) == 2


def test_cli_table_lists_detectors(capsys):
    from loopwarden.cli import main

    assert main(["tune", str(DATA / "fleet.jsonl"), "--config", str(DATA / "fleet.config.json5")]) == 0
    out = capsys.readouterr().out
    for name in ("generic_repeat", "ping_pong", "unknown_tool_repeat", "clamped"):
        assert name in out


# ---------------------------------------------------------------- the command line and the plot


def test_a_trace_after_the_sweep_specs_is_a_trace(tmp_path, capsys):
    from loopwarden.cli import main

    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(b"\n".join(synthetic(3)))
    config = str(DATA / "enabled.config.json")
    argv = ["tune", "--config", config, "--json", "--sweep", "warningThreshold=4:5", str(trace)]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert [s["knobs"] for s in report["settings"]] == [{"warningThreshold": 4}, {"warningThreshold": 5}]
    assert report["events"] > 0
    assert main(["tune", "--sweep", "warningThreshold=4:5"]) == 2
    assert "no TRACE given" in capsys.readouterr().err


def test_tune_says_when_detection_is_off(tmp_path, capsys):
    from loopwarden.cli import main

    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(b"\n".join(synthetic(2)))
    assert main(["tune", str(trace), "--json"]) == 0
    captured = capsys.readouterr()
    assert "loopwarden tune: loop detection is off" in captured.err
    assert json.loads(captured.out)["settings"][0]["fleet"]["blocked"] == 0


def _report(tmp_path):
    prep = prepare(b"\n".join(synthetic(6)).splitlines())
    fleet = FleetConfig({"enabled": True})
    return tune(prep, fleet, grid([("warningThreshold", [4, 5, 6]), ("criticalThreshold", [20, 30, 40, 50])]))


@pytest.mark.parametrize("field", ["blocked", "cut_calls"])
def test_plot_merges_lines_with_the_same_counts(tmp_path, field):
    from loopwarden.tune import plot_series

    report = _report(tmp_path)
    series = plot_series(report, field)
    drawn = [(s.xs, s.ys) for s in series]
    assert len(drawn) == len(set(map(repr, drawn)))  # no two lines on top of each other
    assert len(series) < 4 if field == "blocked" else True  # here thresholds above every streak block alike
    labels = [label for s in series for label in s.labels]
    assert sorted(labels) == sorted(f"criticalThreshold={c}" for c in (20, 30, 40, 50))  # every setting named once
    by_label = {label: s for s in series for label in s.labels}
    for setting in report.settings:
        line = by_label[f"criticalThreshold={setting.knobs['criticalThreshold']}"]
        i = line.xs.index(setting.knobs["warningThreshold"])
        assert line.ys[i] == getattr(setting.fleet, field)


def test_plot_has_whole_number_ticks_and_its_legends_outside_the_charts(tmp_path):
    import matplotlib.pyplot as plt

    from loopwarden.tune import draw

    fig = draw(_report(tmp_path))
    try:
        fig.canvas.draw()
        for ax in fig.axes:
            for ticks in (ax.get_xticks(), ax.get_yticks()):
                assert all(float(t).is_integer() for t in ticks), ticks
            legend = ax.get_legend()
            assert legend is not None
            box = legend.get_window_extent()
            for other in fig.axes:
                assert not box.overlaps(other.get_window_extent()), "a legend covers a chart"
            assert box.y0 >= 0  # inside the figure, not cut off
    finally:
        plt.close(fig)
