"""Claude Code with ``loopwarden hook`` installed, against a scripted model and a live decision service.

The real CLI (pinned in tests/hosts/install.py) runs headless; its hooks run the real hook
command, which asks a ``loopwarden sidecar`` process (OpenClaw's thresholds, no broker: it
decides locally). What the model received is read from the model server (tests/hosts/scenarios.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hosts import scenarios
from tests.hosts.harness import ClaudeCode

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class TestClaudeCode(scenarios.HostTests):
    host_class = ClaudeCode

    def test_an_http_hook_straight_at_the_service_warns_and_blocks_alike(self, tmp_path: Path, model, service) -> None:
        """``install --http``: Claude Code posts its hook JSON to /v1/hooks/claude-code; no hook process."""
        host = ClaudeCode(tmp_path, model.url)
        scenarios.install_hooks(host, service.url, None, "--http")
        assert '"type": "http"' in host.hooks_file.read_text()
        scenarios.looping_session_is_warned_at_10_and_blocked_at_20(host, model)
