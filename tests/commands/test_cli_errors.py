"""One line, exit 2, for every command's bad input: a table over every sub-command of ``loopwarden --help``.

Each row runs the real command (``python -m loopwarden.cli``) on an input a user gets wrong: a config
that is missing or has a stray comma, a file that is not there, a port that is taken, a broker out of
reach, an unknown choice. stderr must hold no traceback and one line ``loopwarden COMMAND...: ...``
naming the problem; rows marked ``logs`` are services that log before they fail (their log lines
come first, the one line last).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from loopwarden.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
GOOD = str(ROOT / "deploy" / "config" / "loopwarden.json5")
TRACE = str(ROOT / "tests" / "data" / "fleet.jsonl")


class Row(NamedTuple):
    argv: list[str]
    says: str  # what the one line must contain
    logs: bool = False  # a service's log lines may come before it


ROWS = [
    Row(["dev", "--config", "nope.json5"], "loopwarden dev: cannot read config nope.json5"),
    Row(["dev", "--duration", "soon"], "argument --duration: invalid float value: 'soon'"),
    Row(["up", "--config", "{bad}"], "line 3: not valid JSON/JSON5: Stray comma"),
    Row(
        ["up", "--config", GOOD, "--broker-port", "{busy}"],
        "is in use (another loopwarden up?); choose another broker port",
    ),
    Row(["sidecar", "--config", "nope.json5"], "loopwarden sidecar: cannot read config nope.json5"),
    Row(["sidecar", "--config", "{bad}"], "line 3: not valid JSON/JSON5: Stray comma (--config)"),
    Row(
        ["sidecar", "--config", GOOD, "--port", "{busy}", "--no-socket"],
        "address already in use; choose another port or address (--port, --host)",
        logs=True,
    ),
    # a port out of range: bind's traceback (up, mcp --http) or, in asyncio, served modulo 65536 (sidecar)
    Row(
        ["sidecar", "--port", "99999", "--no-socket"], "loopwarden sidecar: argument --port: '99999' is not a TCP port"
    ),
    Row(["up", "--broker-port", "70000"], "loopwarden up: argument --broker-port: '70000' is not a TCP port"),
    Row(["dev", "--port", "99999"], "loopwarden dev: argument --port: '99999' is not a TCP port"),
    Row(["mcp", "--http", "127.0.0.1:99999", "--", "true"], "--http 127.0.0.1:99999: give HOST:PORT (a port 0-65535)"),
    Row(["hook", "install", "claude-code", "--dir", "{tmp}/TYPO"], "--dir {tmp}/TYPO: no such folder"),
    Row(["hook", "install", "vscode"], "loopwarden hook install: argument host: invalid choice: 'vscode'"),
    Row(["mcp", "--config", "/missing.json5", "--", "true"], "loopwarden mcp: cannot read config /missing.json5"),
    Row(["mcp", "--config", "{bad}", "--", "true"], "Stray comma; give a readable JSON/JSON5 config with --config"),
    Row(
        ["mcp", "install", "claude-code", "--", "true"],
        "loopwarden mcp install: the following arguments are required: --name",
    ),
    Row(
        ["mcp", "install", "vscode", "--name", "x", "--", "true"],
        "loopwarden mcp install: argument host: invalid choice",
    ),
    Row(["replay", "/missing.jsonl"], "loopwarden replay: cannot read /missing.jsonl: No such file or directory"),
    Row(["replay", TRACE, "--config", "{bad}"], "loopwarden replay: {bad} line 3: not valid JSON/JSON5"),
    Row(["config", "check", "{bad}"], "loopwarden config check: {bad} line 3: not valid JSON/JSON5: Stray comma"),
    Row(["config", "check", "/missing.json5"], "cannot read config /missing.json5"),
    Row(["config", "lint", "x"], "loopwarden config: argument SUBCOMMAND: invalid choice: 'lint'"),
    Row(["tune", "/missing.jsonl"], "loopwarden tune: cannot read /missing.jsonl"),
    Row(["tune", TRACE, "--config", "{bad}"], "Stray comma"),
    Row(["worker", "--config", "{bad}"], "loopwarden worker: {bad} line 3"),
    Row(
        ["worker", "--broker", "kafka://127.0.0.1:{closed}", "--data-dir", "{tmp}/w", "--port", "{free}"],
        "loopwarden worker: cannot reach the broker at 127.0.0.1:{closed}: check --broker",
        logs=True,
    ),
    Row(["spans", "--encoding", "protobuf"], "argument --encoding: invalid choice: 'protobuf'"),
    Row(
        ["spans", "--bootstrap", "127.0.0.1:{closed}"],
        "loopwarden spans: cannot reach the broker at 127.0.0.1:{closed}: check --bootstrap",
        logs=True,
    ),
    Row(
        ["keys", "sign", "--key-file", "/missing.key", "--topic", "t", "x"],
        "loopwarden keys sign: cannot read the private key (--key-file): /missing.key: No such file or directory",
    ),
    Row(
        ["simulate", "--broker", "kafka://127.0.0.1:{closed}", "--duration", "0.1"],
        "loopwarden simulate: cannot reach the broker at 127.0.0.1:{closed}: check --broker",
        logs=True,  # aiokafka's own "Unable connect" line
    ),
    Row(["bench", "engnie"], "loopwarden bench: argument TARGET: invalid choice: 'engnie'"),
]


def test_every_command_of_the_help_has_a_row() -> None:
    assert {row.argv[0] for row in ROWS} == {name for name, _ in COMMANDS}


def _port(listen: bool) -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    if listen:
        sock.listen()
    return sock, sock.getsockname()[1]


@pytest.mark.parametrize("row", ROWS, ids=lambda row: " ".join(row.argv)[:60])
def test_a_bad_input_is_one_line_and_exit_2(row: Row, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json5"
    bad.write_text("{\n  tools: {\n    loopDetection: {enabled: true,,}\n  }\n}\n")
    busy, busy_port = _port(listen=True)
    closed, closed_port = _port(listen=False)
    free, free_port = _port(listen=False)
    closed.close()
    free.close()
    fill = {"bad": str(bad), "tmp": str(tmp_path), "busy": busy_port, "closed": closed_port, "free": free_port}
    try:
        out = subprocess.run(
            [sys.executable, "-m", "loopwarden.cli", *(a.format(**fill) for a in row.argv)],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
            timeout=120,
        )
    finally:
        busy.close()
    lines = out.stderr.strip().splitlines()
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == 2, out.stderr
    assert lines, "no line at all"
    ours = [line for line in lines if line.startswith(f"loopwarden {row.argv[0]}")]
    assert len(ours) == 1 and lines[-1] == ours[0], out.stderr
    if not row.logs:
        assert lines == ours, out.stderr
    assert row.says.format(**fill) in ours[0]


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only errors a user can fix become one line: anything else still raises, for its traceback."""
    import argparse

    from loopwarden import UsageError, cli

    assert cli.error_line(KeyError("run"), "replay") is None
    assert cli.error_line(ValueError("bad"), "replay") is None
    assert cli.error_line(UsageError("--x: wrong"), "replay") == "--x: wrong"
    assert cli.error_line(FileNotFoundError(2, "No such file or directory", "/a"), "up") == (
        "/a: No such file or directory"
    )

    def broken(args: argparse.Namespace) -> int:
        raise KeyError("a bug")

    parser = cli.build_parser()
    args = parser.parse_args(["replay", TRACE])
    args.func = broken
    monkeypatch.setattr(cli, "build_parser", lambda: type("P", (), {"parse_args": lambda self, argv: args})())
    with pytest.raises(KeyError):
        cli.main(["replay", TRACE])
