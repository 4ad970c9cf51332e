"""Real broker, real worker processes: fixtures of the live tests, wherever their package's folder is.

A plugin of the root ``tests/conftest.py`` (``pytest_plugins``), so every test folder sees them.

``tansu`` starts one embedded Tansu for the session (bootstrap string
``127.0.0.1:PORT``); tests isolate themselves by topic names and app id
(``names``), not by brokers. ``workers(names, tag, config=..., extra=...)``
starts ``loopwarden worker`` subprocesses with their own data dir and HTTP
port, stopped at teardown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from loopwarden.devtools.broker import EmbeddedBroker
from tests.support.live import Names, WorkerProcess


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterable[str]:
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with EmbeddedBroker(log_path=log) as broker:
        yield broker.bootstrap


@pytest.fixture
def names(request: pytest.FixtureRequest) -> Names:
    return Names(re.sub(r"[^a-z]", "", request.node.name.lower())[:12])


@pytest.fixture
def workers(tansu: str, tmp_path: Path) -> Iterable[Any]:
    started: list[WorkerProcess] = []

    def make(names: Names, tag: str = "w", config: Path | None = None, extra: list[str] | None = None) -> WorkerProcess:
        w = WorkerProcess(tansu, names, tmp_path / f"data-{tag}", config=config, extra=extra, log_dir=tmp_path)
        started.append(w)
        return w.start()

    yield make
    for w in started:
        w.stop()
