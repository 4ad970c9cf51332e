"""Agent frameworks that cannot share the dev venv, each in a venv of its own cached outside the clone.

Strands Agents and CrewAI pin versions of OpenTelemetry, the MCP SDK, pydantic or
openai that conflict with the dev extra (google-adk pins opentelemetry-sdk <= 1.44).
Their adapter tests run the framework in a driver process on such a venv: the
framework's extra from this clone's pyproject.toml, with this clone installed
editable (so the driver imports the adapter under test). The venv lives in
``LOOPWARDEN_FRAMEWORK_CACHE`` (default ``~/.cache/loopwarden/frameworks``), one
per extra and its requirements, made once under a lock (a marker file says it
is complete); a clone that finds it pointing at another clone re-installs
itself there without dependencies (seconds), as deploy/ci/venv.sh does for
``.venv``. Two clones cannot run these tests at the same moment.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

CLONE = Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    root = os.environ.get("LOOPWARDEN_FRAMEWORK_CACHE") or str(Path.home() / ".cache" / "loopwarden" / "frameworks")
    return Path(root)


def framework_python(extra: str, timeout: float = 1200) -> Path:
    """The python of a venv with ``loopwarden[extra]`` of this clone installed (editable); made the first time.

    Fails the test (never skips it) when the install fails: these tests are evidence."""
    project = tomllib.loads((CLONE / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"][extra]]  # a change makes a new venv
    key = hashlib.sha256("\0".join([extra, *wanted]).encode()).hexdigest()[:12]
    folder = cache_root() / f"{extra}-{key}"
    python = folder / "bin" / "python"
    done = folder / ".installed"
    cache_root().mkdir(parents=True, exist_ok=True)
    with open(cache_root() / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(folder)
            _pip(python, ["-e", f"{CLONE}[{extra}]"], extra, timeout)
            done.write_text(extra + "\n")
        elif _installed_from(python) != CLONE / "streams":
            _pip(python, ["--no-deps", "-e", str(CLONE)], extra, timeout)
    return python


def _installed_from(python: Path) -> Path | None:
    """Where the venv's loopwarden package is (its editable install's clone), None if it has none."""
    probe = "import os, loopwarden; print(os.path.dirname(os.path.realpath(loopwarden.__file__)))"
    proc = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60)
    return Path(proc.stdout.strip()) if proc.returncode == 0 else None


def _pip(python: Path, args: list[str], extra: str, timeout: float) -> None:
    proc = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        pytest.fail(f"installing loopwarden[{extra}] failed:\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}")


if __name__ == "__main__":  # python tests/frameworks.py EXTRA...: make the venvs ahead of the tests
    for name in sys.argv[1:]:
        print(framework_python(name))
