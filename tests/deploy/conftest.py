"""Fixtures shared by the operations tests (deploy/: dashboard, alert rules, manifests)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
INSTALL_HINT = "install it with: bash deploy/ci/install-prometheus.sh (Debian package 'prometheus')"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def dashboard_module() -> ModuleType:
    """deploy/grafana/dashboard.py, imported by path (deploy/ is not a package)."""
    return _load("loopwarden_dashboard", DEPLOY / "grafana" / "dashboard.py")


@pytest.fixture(scope="session")
def dashboard_doc(dashboard_module) -> dict:
    import json

    return json.loads(dashboard_module.render())


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip(f"promtool is not installed; {INSTALL_HINT}")
    return path


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.skip(f"prometheus is not installed; {INSTALL_HINT}")
    return path


@pytest.fixture(scope="session")
def worker_metric_names() -> set[str]:
    """Every sample name the worker's registry can export (``_total``, ``_bucket`` ... included)."""
    from loopwarden.worker.metrics import Metrics

    names: set[str] = set()
    for family in Metrics().registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.update({family.name + "_total", family.name + "_created"})
        elif family.type == "histogram":
            names.update(family.name + s for s in ("_bucket", "_count", "_sum", "_created"))
    return names
