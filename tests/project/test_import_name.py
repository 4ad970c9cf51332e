"""One import name: ``loopwarden``, mapped onto the repository's streams/ and schemas/ folders."""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _packages_on_disk() -> set[str]:
    found = set()
    for folder, name in (("streams", "loopwarden"), ("schemas", "loopwarden.schemas")):
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    return found


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert listed == _packages_on_disk()


def test_app_folder_with_generic_module_names_does_not_shadow_loopwarden(tmp_path):
    """A user's ``schemas.py`` and ``streams.py`` (common names) must not break the client import."""
    (tmp_path / "schemas.py").write_text("X = 1\n")
    (tmp_path / "streams.py").write_text("Y = 2\n")
    code = (
        "import schemas, streams\n"
        "from loopwarden.runner import LoopClient\n"
        "from loopwarden.schemas import ToolCall\n"
        "assert schemas.X == 1 and streams.Y == 2\n"
        "print(LoopClient.__module__, ToolCall.__module__)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["loopwarden.runner.client", "loopwarden.schemas.events"]
