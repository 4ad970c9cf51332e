"""Fixtures of the real-host tests: a scripted model server and a decision service, once per module."""

from __future__ import annotations

import pytest

from tests.hosts import scenarios
from tests.hosts.fake_models import FakeModelServer


@pytest.fixture(scope="module")
def model():
    with FakeModelServer() as server:
        yield server


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory):
    sidecar = scenarios.sidecar(tmp_path_factory.mktemp("sidecar") / "sidecar.log")
    yield sidecar
    sidecar.stop()


@pytest.fixture(scope="module")
def low_service(tmp_path_factory: pytest.TempPathFactory):
    """A decision service with low thresholds (warn at 3, block after 6 identical outcomes), for short runs."""
    from tests.hosts.tool_rows import LOW_CONFIG

    folder = tmp_path_factory.mktemp("low-sidecar")
    config = folder / "low.json5"
    config.write_text(LOW_CONFIG)
    sidecar = scenarios.sidecar(folder / "sidecar.log", config)
    yield sidecar
    sidecar.stop()
