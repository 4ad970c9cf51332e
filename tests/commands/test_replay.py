"""``loopwarden replay`` end to end on the hand-worked traces in tests/data (schemas/WIRE.md, "`loopwarden replay`").

Each ``NAME.jsonl`` has a ``NAME.expected.jsonl`` worked out by hand from the spec
(digests are SHA-256 of canonical strings written out by hand). Guard rows leave
out ``warning_key``: the spec defines no key for ``compaction_loop_persisted``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loopwarden.replay import BadLine, replay_lines
from loopwarden.schemas.config import load_config

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
CASES = {
    "fleet": "fleet.config.json5",
    "parallel": "enabled.config.json",
    "guard": None,
    "malformed": "low.config.json5",
    "blank_name": "blank_name.config.json5",
}
FIELD_ORDER = [
    "event_index",
    "run_id",
    "agent_id",
    "session_id",
    "level",
    "detector",
    "count",
    "warning_key",
    "tool_name",
    "paired_tool_name",
    "message",
    "emitted",
    "action",
]


def expected_rows(name):
    return [
        json.loads(line) for line in (DATA / f"{name}.expected.jsonl").read_text(encoding="utf-8").splitlines() if line
    ]


def compare(actual, expected):
    assert len(actual) == len(expected), f"{len(actual)} rows, expected {len(expected)}:\n" + "\n".join(
        json.dumps(a) for a in actual
    )
    for i, (a, e) in enumerate(zip(actual, expected)):
        a = dict(a)
        if "warning_key" not in e:
            a.pop("warning_key", None)
        assert a == e, f"row {i} (event_index {e['event_index']})"


def cli_args(name, config=None):
    args = ["replay", str(DATA / f"{name}.jsonl")]
    if config:
        args += ["--config", str(DATA / config)]
    return args


def run_main(args, capsys):
    from loopwarden.cli import main

    rc = main(args)
    out = capsys.readouterr()
    return rc, [json.loads(line) for line in out.out.splitlines() if line.strip()], out.err


# ---------------------------------------------------------------- library path


@pytest.mark.parametrize("name", list(CASES))
def test_replay_lines_matches_hand_worked_expected(name):
    config = load_config(DATA / CASES[name] if CASES[name] else None)
    with open(DATA / f"{name}.jsonl", "rb") as fh:
        rows = [r for r in replay_lines(fh, config) if not isinstance(r, BadLine)]
    compare(rows, expected_rows(name))


# ---------------------------------------------------------------- CLI in process


@pytest.mark.parametrize("name", list(CASES))
def test_cli_replay_matches_hand_worked_expected(name, capsys):
    rc, rows, _err = run_main(cli_args(name, CASES[name]), capsys)
    assert rc == 0
    compare(rows, expected_rows(name))


def test_cli_replay_field_order(capsys):
    rc, rows, _ = run_main(cli_args("fleet", CASES["fleet"]), capsys)
    assert rc == 0
    for row in rows:
        assert list(row) == [k for k in FIELD_ORDER if k in row]
        assert set(FIELD_ORDER) - set(row) <= {"paired_tool_name"}
    assert any("paired_tool_name" in r for r in rows)


def test_cli_replay_without_config_only_guard_runs(capsys):
    # fleet.jsonl with the defaults: enabled missing -> no rolling detector; the guard is on (rule 10.1),
    # and the only armed run is agent "quiet"'s z1: its 3rd identical (read, {"path":"x"}, "same") aborts.
    lines = [line for line in (DATA / "fleet.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    quiet_results = [
        i
        for i, line in enumerate(lines)
        if json.loads(line).get("agent_id") == "quiet" and json.loads(line)["type"] == "tool_result"
    ]
    rc, rows, _ = run_main(cli_args("fleet"), capsys)
    assert rc == 0
    assert [(r["event_index"], r["agent_id"], r["detector"], r["count"], r["action"]) for r in rows] == [
        (quiet_results[2], "quiet", "compaction_loop_persisted", 3, "abort")
    ]


def test_cli_replay_malformed_lines_reported_and_skipped(capsys):
    rc, rows, err = run_main(cli_args("malformed", CASES["malformed"]), capsys)
    assert rc == 0
    compare(rows, expected_rows("malformed"))
    err_lines = [line for line in err.splitlines() if line.strip()]
    assert len(err_lines) == 7, err
    config = load_config(DATA / CASES["malformed"])
    with open(DATA / "malformed.jsonl", "rb") as fh:
        bad = [r for r in replay_lines(fh, config) if isinstance(r, BadLine)]
    for idx, line, b in zip(range(1, 8), err_lines, bad):
        assert re.search(rf"(?<!\d){idx}(?!\d)", line), (idx, line)  # the index
        assert b.reason in line, (b.reason, line)  # and the reason


def test_replay_lines_bad_line_reasons():
    config = load_config(DATA / CASES["malformed"])
    with open(DATA / "malformed.jsonl", "rb") as fh:
        bad = [r for r in replay_lines(fh, config) if isinstance(r, BadLine)]
    assert [b.event_index for b in bad] == [1, 2, 3, 4, 5, 6, 7]
    assert all(b.reason for b in bad)
    assert bad[0].reason != bad[1].reason  # bad JSON vs missing agent_id
    assert bad[2].reason != bad[3].reason  # wrong type vs unknown type


@pytest.mark.parametrize(
    "args",
    [
        ["replay", "/nonexistent/events.jsonl"],
        ["replay", str(DATA / "fleet.jsonl"), "--config", "/nonexistent/config.json5"],
    ],
    ids=["missing-events", "missing-config"],
)
def test_cli_replay_exit_2_when_unreadable(args, capsys):
    from loopwarden.cli import main

    assert main(args) == 2
    assert capsys.readouterr().err.strip()


def test_cli_replay_exit_2_for_invalid_config(tmp_path, capsys):
    from loopwarden.cli import main

    bad = tmp_path / "bad.json5"
    bad.write_text("{tools: {loopDetection: {enabled: true,,}}", encoding="utf-8")
    assert main(["replay", str(DATA / "fleet.jsonl"), "--config", str(bad)]) == 2
    notobj = tmp_path / "list.json"
    notobj.write_text("[1, 2]", encoding="utf-8")
    assert main(["replay", str(DATA / "fleet.jsonl"), "--config", str(notobj)]) == 2


def test_cli_replay_empty_file(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    rc, rows, err = run_main(["replay", str(empty)], capsys)
    assert (rc, rows) == (0, [])


# ---------------------------------------------------------------- subprocess


def test_cli_replay_subprocess_output_and_no_faust():
    snippet = (
        "import sys\n"
        "from loopwarden.cli import main\n"
        f"rc = main({cli_args('fleet', CASES['fleet'])!r})\n"
        "heavy = sorted(m for m in ('faust', 'aiokafka') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
        "sys.exit(rc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", snippet], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    compare([json.loads(x) for x in proc.stdout.splitlines() if x.strip()], expected_rows("fleet"))


def test_cli_replay_as_module_subprocess():
    proc = subprocess.run(
        [sys.executable, "-m", "loopwarden.cli", *cli_args("guard")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    compare([json.loads(x) for x in proc.stdout.splitlines() if x.strip()], expected_rows("guard"))
