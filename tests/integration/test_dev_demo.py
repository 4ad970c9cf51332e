"""``loopwarden dev``: the README's run command brings up broker, worker, simulator and view, then stops."""

from __future__ import annotations

import subprocess
import sys

from .support import REPO


def test_dev_demo_runs_and_stops_cleanly(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "streams.cli", "dev", "--duration", "6", "--rate", "300"],
                          cwd=REPO, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "latest verdicts" in out and "verdicts by action and detector" in out
    summary = [line for line in out.splitlines() if line.startswith("sent ")][-1]
    sent = int(summary.split()[1])
    processed = int(summary.rsplit(" ", 2)[-2])
    assert sent > 0 and processed == sent
