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
