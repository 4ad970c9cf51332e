"""Suite-wide collection order: the long live modules first, the many short unit modules last.

``tests/run.sh`` runs the suite on two pytest-xdist workers, one module at a time
(``--dist loadfile``), handed out in this order. A long module started last would
keep one worker busy while the other idles; the unit modules at the end fill in
instead. Within a module the tests keep their own order.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("slow") is not None:
        return 0
    return 2 if "unit" in Path(str(item.fspath)).parts else 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: modules and their tests keep their relative order
