"""Every promise of deploy/SECURITY.md names a test that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_tested_by_names_an_existing_test():
    text = (ROOT / "deploy" / "SECURITY.md").read_text(encoding="utf-8")
    refs = re.findall(r"`(?:tests/)?((?:[a-z_]+/)+test_\w+\.py)::(\w+)`", text)  # from tests/
    assert len(refs) >= 20
    missing = [
        f"{path}::{name}"
        for path, name in refs
        if not (ROOT / "tests" / path).is_file()
        or not re.search(rf"^(async )?def {name}\(", (ROOT / "tests" / path).read_text(), re.M)
    ]
    assert not missing, missing
