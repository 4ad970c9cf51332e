"""What a worker says at the default log level: a line at start, one when ready, one at stop,
in one format, with Faust's and aiokafka's start-up lines only at debug."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.integration

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")


def _log_lines(worker) -> list[str]:
    return worker.log_path.read_text().splitlines()


def test_default_level_says_start_ready_stop_in_one_format(workers, names, tmp_path):
    config = tmp_path / "on.json"
    config.write_text('{"tools": {"loopDetection": {"enabled": true}}}')
    w = workers(names, config=config)  # no --log-level: the worker's default
    assert "--log-level" not in w.command()
    w.wait_ready()
    assert w.stop() == 0
    lines = _log_lines(w)
    assert all(LINE.match(line) for line in lines), "\n".join(lines)
    info = [line for line in lines if " INFO " in line]
    assert len(info) == 3, "\n".join(lines)
    assert re.search(
        r"INFO loopwarden\.worker: loopwarden worker \S+ starting: broker kafka://127\.0\.0\.1:\d+, group ", info[0]
    )
    assert f"events {names.events} -> verdicts {names.control}" in info[0] and "detection on" in info[0]
    assert "INFO loopwarden.worker: ready: events partitions" in info[1]
    assert "INFO loopwarden.worker: stopping" in info[2]
    assert not [line for line in lines if re.search(r" (faust|mode|aiokafka)[\w.]*: ", line)], "\n".join(lines)


def test_detection_off_is_said_at_start_and_debug_shows_faust(workers, names):
    w = workers(names, extra=["--log-level", "debug"])
    w.wait_ready()
    assert w.stop() == 0
    lines = _log_lines(w)
    start = next(line for line in lines if "starting: broker" in line)
    assert "detection off" in start
    assert any("WARNING loopwarden.worker: loop detection is off" in line for line in lines)
    assert any(re.search(r" DEBUG (faust|mode|aiokafka)[\w.]*: ", line) for line in lines)
