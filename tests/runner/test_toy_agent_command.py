"""tests/examples/toy_agent.py runs from a plain ``python`` that lacks loopwarden's packages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.live import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_toy_agent_runs_from_a_python_without_the_packages():
    base = Path(sys.base_prefix) / "bin" / "python3"
    if (
        not base.exists()
        or subprocess.run([str(base), "-I", "-c", "import msgspec"], capture_output=True).returncode == 0
    ):
        pytest.skip("no interpreter without msgspec to start from")
    proc = subprocess.run(
        [str(base), "-I", "tests/examples/toy_agent.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "block" in proc.stdout and '"blocked": 1' in proc.stdout
