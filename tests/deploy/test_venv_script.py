"""deploy/ci/venv.sh, the set-up both README commands share: when it installs and when it does not.

A stand-in ``.venv/bin/python`` answers the location probe as told and records pip calls,
so the script's decisions are checked without building a venv.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
case "$*" in
  *"-m pip"*) echo "$*" >> "$(dirname "$0")/../pip-calls"; exit 0 ;;
  *"import os, loopwarden"*) cat "$(dirname "$0")/../where"; exit 0 ;;
esac
exec {real} "$@"
"""


def clone_with_venv(tmp: Path, where: str) -> Path:
    (tmp / "deploy/ci").mkdir(parents=True)
    shutil.copy(ROOT / "deploy/ci/venv.sh", tmp / "deploy/ci/venv.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    (tmp / "streams").mkdir()
    bin_dir = tmp / ".venv/bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text(FAKE_PYTHON.format(real=sys.executable))
    python.chmod(0o755)
    (tmp / ".venv/where").write_text(where.replace("CLONE", str(tmp.resolve())) + "\n")
    digest = hashlib.sha256((tmp / "pyproject.toml").read_bytes()).hexdigest()
    (tmp / ".venv/.loopwarden-installed").write_text(f"{digest} dev\n")
    return tmp


def run(tmp: Path) -> tuple[subprocess.CompletedProcess, str]:
    out = subprocess.run(["bash", "deploy/ci/venv.sh", "dev"], cwd=tmp, capture_output=True, text=True, timeout=60)
    calls = tmp / ".venv/pip-calls"
    return out, calls.read_text() if calls.exists() else ""


def test_an_editable_install_of_this_clone_is_left_alone(tmp_path):
    out, pip = run(clone_with_venv(tmp_path, "CLONE/streams"))
    assert out.returncode == 0, out.stderr
    assert pip == ""


@pytest.mark.parametrize("where", ["/elsewhere/site-packages/loopwarden", ""])
def test_a_non_editable_or_broken_install_is_repaired(tmp_path, where):
    # what `pip install '.[pydantic-ai]'` (no -e) leaves: loopwarden imports from site-packages
    out, pip = run(clone_with_venv(tmp_path, where))
    assert out.returncode == 0, out.stderr
    assert "reinstalling" in out.stderr
    assert "install -q --disable-pip-version-check -e .[dev]" in pip
