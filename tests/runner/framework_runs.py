"""Runs an adapter driver (tests/support/drivers/) on a framework's own venv and reads its outcome."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

DRIVERS = Path(__file__).resolve().parents[1] / "support" / "drivers"


def run_driver(python: Path, driver: str, client: dict, runs: list, *, compaction: bool = False) -> dict:
    """``runs``: (model turns, tool behaviour) per concurrent run; returns the driver's JSON outcome."""
    scenario = {
        "client": client,
        "compaction": compaction,
        "runs": [{"turns": turns, "tool": tool} for turns, tool in runs],
    }
    proc = subprocess.run(
        [str(python), str(DRIVERS / driver)],
        input=json.dumps(scenario),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
