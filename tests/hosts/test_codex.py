"""Codex CLI with ``loopwarden hook`` installed, against a scripted model and a live decision service.

The real CLI (pinned in tests/hosts/install.py) runs headless; its hooks run the real hook
command, which asks a ``loopwarden sidecar`` process (OpenClaw's thresholds, no broker: it
decides locally). What the model received is read from the model server (tests/hosts/scenarios.py).
"""

from __future__ import annotations

import pytest

from tests.hosts import scenarios
from tests.hosts.harness import CodexCli

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class TestCodexCli(scenarios.HostTests):
    host_class = CodexCli
