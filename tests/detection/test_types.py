"""The engine type-checks: ``mypy`` on ``loopwarden.detection`` reports nothing (configured in pyproject.toml).

The package is installed from ``streams/`` and ``schemas/`` under the import name ``loopwarden``
(pyproject's package-dir), which mypy cannot follow through the editable install's import hook;
so the check runs on a tree of links that lays the folders out under that name.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def link_tree(where: Path) -> Path:
    """``where/loopwarden``: links to ``streams/``'s entries, with ``schemas/`` as its ``schemas``."""
    package = where / "loopwarden"
    package.mkdir(parents=True)
    for entry in (ROOT / "streams").iterdir():
        (package / entry.name).symlink_to(entry)
    (package / "schemas").symlink_to(ROOT / "schemas")
    return where


def test_mypy_finds_nothing_in_the_engine(tmp_path):
    tree = link_tree(tmp_path / "tree")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
        ]
        + ["-p", "loopwarden.detection"],
        cwd=tree,
        env={**os.environ, "MYPYPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
