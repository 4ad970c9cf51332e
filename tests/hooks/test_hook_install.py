"""``loopwarden hook install`` / ``uninstall`` and the user's settings file: its mode, its symlink, its
numbers as written, the user's own hooks, and a project folder that does not exist."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from loopwarden.hooks import install


def _settings(tmp_path: Path, host: str = "claude-code") -> Path:
    path = install.settings_file(host, tmp_path, user=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_a_0600_settings_file_stays_0600(tmp_path: Path) -> None:
    path = _settings(tmp_path)
    path.write_text('{"env": {"API_KEY": "secret"}}')
    path.chmod(0o600)
    assert install.main(["claude-code", "--dir", str(tmp_path)]) == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["env"] == {"API_KEY": "secret"}


def test_a_new_settings_file_gets_the_umasks_mode(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        assert install.main(["codex", "--dir", str(tmp_path)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(install.settings_file("codex", tmp_path, False).stat().st_mode) == 0o640


def test_a_read_only_settings_file_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _settings(tmp_path, "gemini")
    path.write_text('{"theme": "dark"}')
    path.chmod(0o444)
    assert install.main(["gemini", "--dir", str(tmp_path)]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "read-only (mode 0444)" in line and line.endswith("not changed")
    assert path.read_text() == '{"theme": "dark"}' and stat.S_IMODE(path.stat().st_mode) == 0o444


def test_a_symlinked_settings_file_is_written_through_to_its_target(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "claude-settings.json"
    target.write_text('{"model": "opus"}')
    target.chmod(0o600)
    project = tmp_path / "project"
    link = _settings(project)
    link.symlink_to(target)
    assert install.main(["claude-code", "--dir", str(project)]) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    settings = json.loads(target.read_text())
    assert settings["model"] == "opus" and "PreToolUse" in settings["hooks"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in link.parent.iterdir()) == ["settings.json"]  # no temp file left behind
    assert install.main(["claude-code", "--dir", str(project)], remove=True) == 0
    assert link.is_symlink() and json.loads(target.read_text()) == {"model": "opus", "hooks": {}}


def test_numbers_are_kept_as_written(tmp_path: Path) -> None:
    path = _settings(tmp_path)
    numbers = '"huge": 1e400, "milli": 1.0e3, "big": 123456789012345678901234567890, "neg": -0, "e": 2E+2'
    path.write_text('{"limits": {' + numbers + '}, "name": "caf\u00e9", "odd": "\\ud800"}')
    assert install.main(["claude-code", "--dir", str(tmp_path)]) == 0
    text = path.read_text(encoding="utf-8")
    for written in (
        '"huge": 1e400',
        '"milli": 1.0e3',
        '"big": 123456789012345678901234567890',
        '"neg": -0',
        '"e": 2E+2',
    ):
        assert written in text
    assert "Infinity" not in text and '"name": "caf\u00e9"' in text and '"odd": "\\ud800"' in text
    json.loads(text)  # still JSON


def test_a_users_own_hook_that_mentions_loopwarden_is_kept(tmp_path: Path) -> None:
    path = _settings(tmp_path)
    mine = [
        {"type": "command", "command": "./notify.sh 'loopwarden hook failed'"},
        {"type": "command", "command": "logger loopwarden hook claude-code ran"},
        {"type": "command", "command": "python -m loopwarden.hooks.audit claude-code"},
        {"type": "command", "command": "/opt/bin/wrap /srv/streams/hooks/run.py claude-code --verbose"},
    ]
    earlier = [  # what earlier installs (or HOOKS.md by hand) wrote: replaced
        {"type": "command", "command": "loopwarden hook claude-code --agent-id old"},
        {"type": "command", "command": "/usr/bin/python3 -m loopwarden.hooks claude-code --url=http://127.0.0.1:1"},
        {"type": "command", "command": "/old/clone/.venv/bin/python -S /old/clone/streams/hooks/run.py claude-code"},
        {"type": "http", "url": "http://127.0.0.1:7766/v1/hooks/claude-code", "timeout": 10},
    ]
    path.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": mine + earlier}]}}))
    assert install.main(["claude-code", "--dir", str(tmp_path)]) == 0
    pre = json.loads(path.read_text())["hooks"]["PreToolUse"]
    assert pre[0] == {"matcher": "*", "hooks": mine}
    assert len(pre) == 2 and pre[1]["hooks"][0]["command"].endswith("/hooks/run.py claude-code")
    assert install.main(["claude-code", "--dir", str(tmp_path)], remove=True) == 0
    assert json.loads(path.read_text())["hooks"]["PreToolUse"] == [{"matcher": "*", "hooks": mine}]


def test_a_custom_command_is_recognised_on_the_next_install(tmp_path: Path) -> None:
    path = _settings(tmp_path)
    for agent in ("a", "b"):
        argv = ["claude-code", "--dir", str(tmp_path), "--command", "/opt/lw/hook-wrapper", "--agent-id", agent]
        assert install.main(argv) == 0
    pre = json.loads(path.read_text())["hooks"]["PreToolUse"]
    assert [g["hooks"][0]["command"] for g in pre] == ["/opt/lw/hook-wrapper claude-code --agent-id b"]


def test_uninstall_takes_out_only_loopwardens_hooks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _settings(tmp_path, "cursor")
    mine = {"command": "./audit.sh"}
    path.write_text(json.dumps({"version": 1, "hooks": {"preToolUse": [mine], "sessionStart": []}}))
    before = path.read_text()
    assert install.main(["cursor", "--dir", str(tmp_path)], remove=True) == 0
    assert capsys.readouterr().out.startswith("loopwarden hook uninstall: cursor hooks were not in")
    assert path.read_text() == before  # nothing of ours: not rewritten
    assert install.main(["cursor", "--dir", str(tmp_path)]) == 0
    assert install.main(["cursor", "--dir", str(tmp_path)], remove=True) == 0
    # the events only loopwarden used go with its hooks; the user's, even an empty one, stay
    assert json.loads(path.read_text()) == json.loads(before)
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    assert install.main(["cursor", "--dir", str(empty)], remove=True) == 0
    assert not (empty / ".cursor").exists()  # nothing to take out: nothing created


def test_a_missing_project_folder_is_refused_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    typo = tmp_path / "porject"
    assert install.main(["claude-code", "--dir", str(typo)]) == 2
    assert _one_line(capsys.readouterr().err) == (
        f"loopwarden hook install: --dir {typo}: no such folder (give the project's folder)"
    )
    assert not typo.exists()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"hooks": [1, 2]}', 'its "hooks" is not a JSON object'),
        ('{"hooks": {"PreToolUse": "echo"}}', 'its "hooks".PreToolUse is not a JSON list'),
        ('{"a": 1, "a": 2}', "the key 'a' appears twice in one object"),
        ("[1]", "not a JSON object"),
        ("[" * 100_000, "nested deeper than 100 levels"),
        ("[" * 101 + "]" * 101, "nested deeper than 100 levels"),
        ("\ufeff{}", "Unexpected UTF-8 BOM"),
    ],
)
def test_a_file_of_an_odd_shape_is_left_untouched_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, why: str
) -> None:
    path = _settings(tmp_path)
    path.write_text(text, encoding="utf-8")
    assert install.main(["claude-code", "--dir", str(tmp_path)]) == 1
    assert why in _one_line(capsys.readouterr().err)
    assert path.read_text(encoding="utf-8") == text


def test_uninstall_is_a_hook_command() -> None:
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "loopwarden.hooks", "uninstall", "codex", "--dir", "/nonexistent-folder"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and _one_line(out.stderr).startswith("loopwarden hook uninstall: --dir")


def test_install_says_when_no_service_listens_where_the_hooks_will_ask(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hook finding no service allows every call and says so only on the host's hook stderr, which a
    user rarely sees: ``install`` says it once, and says nothing once the service listens."""
    import socket

    path = str(tmp_path / "lw.sock")
    url = f"unix:{path}"
    assert install.main(["claude-code", "--dir", str(tmp_path), "--url", url]) == 0
    err = capsys.readouterr().err
    assert f"no decision service listens at {url} yet" in _one_line(err)
    assert "until then the hooks allow every call" in err
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        assert install.main(["claude-code", "--dir", str(tmp_path), "--url", url]) == 0
        assert capsys.readouterr().err == ""
    with socket.socket() as port:  # TCP: bound, not listening, so nothing answers there
        port.bind(("127.0.0.1", 0))
        tcp = f"http://127.0.0.1:{port.getsockname()[1]}"
        assert install.main(["claude-code", "--dir", str(tmp_path), "--url", tcp]) == 0
    assert f"at {tcp} yet: start it (loopwarden sidecar --config FILE, --port)" in capsys.readouterr().err
