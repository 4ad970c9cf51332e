"""Claude Code with ``loopwarden hook`` installed, against a scripted model and a live decision service.

The real CLI (pinned in tests/hosts/install.py) runs headless; its hooks run the real
hook command, which asks a ``loopwarden sidecar`` process (OpenClaw's thresholds, no
broker: it decides locally). What the model received is read from the model server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hosts import scenarios
from tests.hosts.fake_models import FakeModelServer
from tests.hosts.harness import ClaudeCode

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _host(root: Path, model: FakeModelServer, url: str) -> ClaudeCode:
    host = ClaudeCode(root, model.url)
    scenarios.install_hooks(host, url)
    return host


def test_a_looping_session_is_warned_at_10_and_blocked_at_20(tmp_path: Path, model, service) -> None:
    scenarios.looping_session_is_warned_at_10_and_blocked_at_20(_host(tmp_path, model, service.url), model)


def test_a_healthy_session_is_never_touched(tmp_path: Path, model, service) -> None:
    scenarios.healthy_session_is_never_touched(_host(tmp_path, model, service.url), model)


def test_two_sessions_never_pool(tmp_path: Path, model, service) -> None:
    scenarios.sessions_never_pool(lambda tag: _host(tmp_path / tag, model, service.url), model)


def test_two_prompts_of_one_session_never_pool(tmp_path: Path, model, service) -> None:
    scenarios.prompts_never_pool(_host(tmp_path, model, service.url), model)


def test_the_service_down_the_agent_runs_unharmed(tmp_path: Path, model) -> None:
    scenarios.service_down_the_agent_runs_unharmed(
        _host(tmp_path, model, f"http://127.0.0.1:{scenarios.free_port()}"), model
    )


def test_an_http_hook_straight_at_the_service_warns_and_blocks_alike(tmp_path: Path, model, service) -> None:
    """``install --http``: Claude Code posts its hook JSON to /v1/hooks/claude-code; no hook process."""
    host = ClaudeCode(tmp_path, model.url)
    scenarios.install_hooks(host, service.url, None, "--http")
    assert '"type": "http"' in host.hooks_file.read_text()
    scenarios.looping_session_is_warned_at_10_and_blocked_at_20(host, model)
