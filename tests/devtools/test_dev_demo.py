"""``loopwarden dev``: the README's run command brings up broker, worker, simulator and view, then stops."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.support.live import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_dev_demo_runs_and_stops_cleanly_with_plain_progress_when_piped(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "loopwarden.cli", "dev", "--duration", "11", "--rate", "300"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out  # not a terminal: no cursor movement, no colours
    progress = [line for line in out.splitlines() if re.match(r"\[\s*\d+s / 11s\] sent \d+", line)]
    assert len(progress) >= 2, out  # a line every 5 s while it runs, not just one frame at the end
    assert "done: 11s" in out and "avg" in out  # the last frame says it finished
    assert "verdicts of detector" in out and out.count("warn     a note to the model") == 1  # the legend, once
    assert "/metrics" not in out.split("done: 11s")[-1]  # the closing frame names no address that is gone
    # the outage scenario (and loops shared by many agents) open incidents; the view lists them
    assert re.search(r"^inc-[0-9a-f]{20} ", out, re.M), out
    assert re.search(r"open incidents [1-9]", out) and re.search(r"open incidents: [1-9]", out), out
    summary = [line for line in out.splitlines() if line.startswith("sent ")][-1]
    sent = int(summary.split()[1])
    processed = int(summary.rsplit(" ", 2)[-2])
    assert sent > 0 and processed == sent
    assert not list(tmp_path.glob("loopwarden-dev-*"))  # the temp folder is gone


def signalled_demo(tmp_path, sig: int, settle: float, *extra: str) -> tuple[subprocess.Popen, str, str]:
    """Start the demo with no end, send ``sig`` once its worker has started and ``settle`` s passed."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopwarden.cli", "dev", "--duration", "0", *extra],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not list(tmp_path.glob("loopwarden-dev-*/worker-*.log")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(tmp_path.glob("loopwarden-dev-*")), "the demo did not start"
        time.sleep(settle)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc, out, err


def test_dev_demo_cleans_up_after_a_closed_terminal(tmp_path):
    proc, out, err = signalled_demo(tmp_path, signal.SIGHUP, 1.0)
    assert proc.returncode == 128 + signal.SIGHUP, err
    assert not list(tmp_path.glob("loopwarden-dev-*")), err
    assert "worker log" not in out + err  # no path of a log that no longer exists


def test_dev_demo_ctrl_c_ends_with_the_summary_and_no_pending_task(tmp_path):
    proc, out, err = signalled_demo(tmp_path, signal.SIGINT, 12.0, "--rate", "300")  # the simulator sends
    assert proc.returncode == 130, out + err
    assert re.search(r"^interrupted: sent [1-9]\d* events, \d+ verdicts; worker processed \d+ events$", out, re.M), out
    assert out.endswith("\n")
    assert "Task was destroyed" not in err and "Traceback" not in err, err
    assert not list(tmp_path.glob("loopwarden-dev-*"))
