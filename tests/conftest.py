"""Suite-wide: the live fixtures, and the collection order (long live modules first, short ones last).

The tree mirrors the source (``tests/worker/`` tests ``streams/worker/``); the kind of a test is a
marker, not a folder: ``integration`` for a module on a real broker, a real host or real processes,
``slow`` for the long ones. The live fixtures (``tansu``, ``names``, ``workers``) are a plugin, so
every folder sees them.

``tests/run.sh`` runs the suite on two pytest-xdist workers, one module at a time
(``--dist loadfile``), handed out in this order. A long module started last would
keep one worker busy while the other idles; the many short modules at the end fill in
instead. Within a module the tests keep their own order.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.support.fixtures"]


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("slow") is not None:
        return 0
    return 1 if item.get_closest_marker("integration") is not None else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: modules and their tests keep their relative order
