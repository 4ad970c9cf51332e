"""Claude Code with ``loopwarden hook`` installed, against a scripted model and a live decision service.

The real CLI (pinned in tests/hosts/install.py) runs headless; its hooks run the real hook
command, which asks a ``loopwarden sidecar`` process (OpenClaw's thresholds, no broker: it
decides locally). What the model received is read from the model server (tests/hosts/scenarios.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwarden.sidecar.process import SidecarProcess
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

    def test_the_users_own_socket_needs_no_url_on_either_side(self, tmp_path: Path, model) -> None:
        """Issue 44 item 10: the service started with no address and the hook installed with no
        ``--url`` meet on the user's own socket (``$HOME/.loopwarden/run/sidecar.sock``; a short root:
        a socket's path is at most 107 bytes)."""
        import shutil
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="lw-"))
        host = ClaudeCode(root, model.url)
        env = {"HOME": str(host.home), "LOOPWARDEN_RUNNER_BOOTSTRAP": ""}
        args = ["--config", str(scenarios.LOOP_CONFIG)]
        service = SidecarProcess(args, log_path=tmp_path / "sidecar.log", env=env, as_given=True).start()
        try:
            assert service.urls == [f"unix:{host.home}/.loopwarden/run/sidecar.sock"]
            scenarios.install_hooks(host, None)
            assert "--url" not in host.hooks_file.read_text()
            scenarios.looping_session_is_warned_at_10_and_blocked_at_20(host, model)
        finally:
            service.stop()
            shutil.rmtree(root, ignore_errors=True)

    def test_an_http_hook_with_a_token_file_is_let_in(self, tmp_path: Path, model) -> None:
        """F10: ``install --http --token-file F`` wrote no Authorization header, so every hook was 401
        and failed open. Claude Code now fills the header from ``LOOPWARDEN_SIDECAR_TOKEN``."""
        token = tmp_path / "token"
        token.write_text("tok-" + "7" * 32 + "\n")
        service = scenarios.sidecar(tmp_path / "sidecar.log", extra=["--token-file", str(token)])
        try:
            host = ClaudeCode(tmp_path, model.url)
            scenarios.install_hooks(host, service.url, None, "--http", "--token-file", str(token))
            assert "tok-" not in host.hooks_file.read_text()  # the token stays out of the settings file
            host.extra_env["LOOPWARDEN_SIDECAR_TOKEN"] = token.read_text().strip()
            scenarios.looping_session_is_warned_at_10_and_blocked_at_20(host, model)
        finally:
            service.stop()
