"""``loopwarden replay``'s messages: file line numbers on stderr, stdin, and the config checks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from loopwarden.cli import main

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
GOOD = (
    '{"type": "tool_call", "agent_id": "a", "run_id": "r", "tool_name": "read", "tool_call_id": "c%d", '
    '"params": {"path": "/x"}}'
)


def trace(tmp_path, lines):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_stderr_names_the_file_line_and_rows_keep_event_index(tmp_path, capsys):
    # file lines: 1 good, 2 blank, 3 good, 4 blank, 5 bad JSON, 6 good, 7 missing agent_id
    lines = [GOOD % 1, "", GOOD % 2, "   ", '{"type": "tool_call"', GOOD % 3, '{"type": "tool_call", "tool_name": "x"}']
    assert main(["replay", trace(tmp_path, lines)]) == 0
    err = [e for e in capsys.readouterr().err.splitlines() if "loop detection is off" not in e]
    assert [re.match(r"line (\d+) \(event_index (\d+)\)", e).groups() for e in err] == [("5", "2"), ("7", "4")]


def test_event_index_of_rows_counts_non_blank_lines_from_zero(tmp_path, capsys):
    lines = [""] + [GOOD % i for i in range(25)]
    assert main(["replay", trace(tmp_path, lines), "--config", str(DATA / "enabled.config.json")]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert rows and rows[0]["event_index"] == 10 and rows[0]["count"] == 10  # the 11th call, file line 12


def test_dash_reads_stdin():
    lines = "\n".join(GOOD % i for i in range(12)) + "\n"
    proc = subprocess.run(
        [sys.executable, "-m", "loopwarden.cli", "replay", "-", "--config", str(DATA / "enabled.config.json")],
        input=lines,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [r["event_index"] for r in rows] == [10, 11]


def test_misspelled_key_is_warned_about(tmp_path, capsys):
    config = tmp_path / "c.json5"
    config.write_text("{tools: {loopDetecton: {enabled: true}}}")
    assert main(["replay", trace(tmp_path, [GOOD % 1]), "--config", str(config)]) == 0
    assert "loopDetecton: unknown key, ignored (did you mean loopDetection?)" in capsys.readouterr().err


def test_malformed_config_names_file_and_line(tmp_path, capsys):
    config = tmp_path / "c.json5"
    config.write_text("{\n  tools: {\n    loopDetection: { enabled: true,, },\n  },\n}\n")
    assert main(["replay", trace(tmp_path, [GOOD % 1]), "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"loopwarden replay: {config} line 3: not valid JSON/JSON5: Stray comma"


def test_replay_says_when_detection_is_off_and_prints_the_same_rows(tmp_path, capsys):
    lines = [GOOD % i for i in range(25)]
    assert main(["replay", trace(tmp_path, lines)]) == 0
    out, err = capsys.readouterr()
    assert out == ""  # verdicts unchanged: nothing detected without enabled
    assert err.startswith("loopwarden replay: loop detection is off") and err.count("\n") == 1
    assert main(["replay", trace(tmp_path, lines), "--config", str(DATA / "enabled.config.json")]) == 0
    out, err = capsys.readouterr()
    assert out and "loop detection is off" not in err
