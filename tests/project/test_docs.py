"""The documentation is self-contained: every reference points inside the repository.

The architecture, the wire contract and the rules are described in
streams/ARCHITECTURE.md, schemas/WIRE.md and streams/detection/RULES.md; no
tracked file may send a reader to a document that is not in the repository,
and every file path those documents (and the README) name must exist.
"""

from __future__ import annotations

import re
import subprocess
import typing
from pathlib import Path

import pytest

from loopwarden.detection import messages

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "streams/ARCHITECTURE.md", "schemas/WIRE.md", "streams/detection/RULES.md")
# The documents the README's map sends a reader to, beside the three above.
MORE_DOCS = (
    "deploy/OPERATIONS.md",
    "deploy/SECURITY.md",
    "deploy/ROLLOUT.md",
    "streams/fleet/FLEET.md",
    "streams/bench/BENCHMARKS.md",
    "streams/runner/integrations/ADAPTERS.md",
    "streams/otel/OTEL.md",
    "streams/sidecar/SIDECAR.md",
    "streams/hooks/HOOKS.md",
    "streams/mcpgate/MCP.md",
    "streams/sidecar/clients/openclaw-plugin/README.md",
    "streams/sidecar/clients/typescript/TYPESCRIPT.md",
)
TEXT_SUFFIXES = (".py", ".md", ".sh", ".yml", ".yaml")
HOST_SETTINGS = (".claude/", ".codex/", ".gemini/", ".cursor/")

# Documents that exist outside the repository only. `wire.md` is matched as a
# lowercase file name not preceded by a path character, so schemas/WIRE.md is fine.
FOREIGN = re.compile(r"DESIGN\.md|BROKER-NOTES|loop-detection\.md|(?<![\w/.-])wire\.md|\.\./shared|/work/shared")

# Conformance tests are frozen (they must stay byte for byte as they are); a
# comment there still names the old wire document. Listed, not pattern-matched.
FROZEN = {"tests/detection/test_engine.py"}

# `path/with/a/slash.ext` inside backticks.
BACKTICK_PATH = re.compile(r"`([A-Za-z0-9_.\-/]+/[A-Za-z0-9_.\-]+\.(?:py|md|json|yml|yaml|sh|toml))`")


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.endswith(TEXT_SUFFIXES)]


def foreign_references(text: str) -> list[str]:
    return [m.group(0) for m in FOREIGN.finditer(text)]


def test_the_pattern_catches_what_it_must_and_spares_our_documents():
    assert foreign_references("see DESIGN.md") == ["DESIGN.md"]
    assert foreign_references("BROKER-NOTES §1") == ["BROKER-NOTES"]
    assert foreign_references("(loop-detection.md §4.4)") == ["loop-detection.md"]
    assert foreign_references('(wire.md, "Events")') == ["wire.md"]
    assert foreign_references("../shared/spec") == ["../shared"]
    assert foreign_references("schemas/WIRE.md and streams/detection/RULES.md") == []


def test_no_tracked_file_points_outside_the_repository():
    files = tracked_files()
    found = []
    for name in files:
        if name in FROZEN or name == "tests/project/test_docs.py":
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for ref in foreign_references(line):
                found.append(f"{name}:{lineno}: {ref}")
    assert found == []


@pytest.mark.parametrize("doc", DOCS + MORE_DOCS)
def test_every_path_a_document_names_exists(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    # a coding agent's own settings files live in the user's project, not here
    paths = {p for p in BACKTICK_PATH.findall(text) if not p.startswith(HOST_SETTINGS)}
    missing = sorted(p for p in paths if not (ROOT / p).exists() and not (ROOT / doc).parent.joinpath(p).exists())
    assert missing == []


def test_the_backtick_pattern_finds_file_paths_only():
    assert BACKTICK_PATH.findall("`schemas/events.py`, `agent.events`, `a/b.toml`, `x.py`") == [
        "schemas/events.py",
        "a/b.toml",
    ]


def test_readme_links_the_three_documents():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for doc in DOCS[1:]:
        assert f"({doc})" in readme, doc


def _rules_templates() -> dict[str, str]:
    """The message templates as RULES.md §8.1 and §10.4 state them, by their label."""
    text = (ROOT / "streams/detection/RULES.md").read_text(encoding="utf-8")
    found = dict(re.findall(r"^- ([a-z_]+(?:, (?:critical|warning))?): `([^`]+)`$", text, re.M))
    abort = re.search(r"^`(CRITICAL: tool \{T\}[^`]+)`$", text, re.M)
    if abort:
        found["compaction_loop_persisted"] = abort.group(1)
    return found


def test_rules_state_the_message_templates_the_engine_uses():
    t = _rules_templates()
    fill = lambda key, **kw: t[key].format(**kw)  # noqa: E731
    assert fill("unknown_tool_repeat", N="jira", n=7) == messages.unknown_tool("jira", 7)
    assert fill("global_circuit_breaker", T="read", n=31) == messages.global_breaker("read", 31)
    assert fill("known_poll_no_progress, critical", T="process", n=20) == messages.poll_critical("process", 20)
    assert fill("known_poll_no_progress, warning", T="process", n=10) == messages.poll_warning("process", 10)
    assert fill("ping_pong, critical", n=21) == messages.ping_pong_critical(21)
    assert fill("ping_pong, warning", n=10) == messages.ping_pong_warning(10)
    assert fill("generic_repeat, critical", T="read", n=20) == messages.generic_critical("read", 20)
    assert fill("generic_repeat, warning", T="read", n=10) == messages.generic_warning("read", 10)
    assert fill("compaction_loop_persisted", T="exec", n=3, windowSize=3) == messages.compaction_loop("exec", 3, 3)


# ---------------------------------------------------------------- the README


def _readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_fits_in_250_lines_and_maps_every_document():
    readme = _readme()
    assert len(readme.splitlines()) <= 250
    for doc in MORE_DOCS:
        assert f"`{doc}`" in readme, doc


def test_readme_keeps_the_two_commands():
    readme = _readme()
    assert "bash tests/run.sh" in readme and "bash deploy/demo.sh" in readme
    assert (
        "bash tests/run.sh" in (ROOT / ".ci" / "run").read_text()
        or "tests/run.sh" in (ROOT / ".ci" / "run").read_text()
    )


def test_readme_runner_example_is_the_example_file_word_for_word():
    """The README's runner code block is tests/examples/runner_example.py between its README markers,
    which the suite runs against `loopwarden up` (tests/devtools/test_up.py)."""
    source = (ROOT / "tests" / "examples" / "runner_example.py").read_text(encoding="utf-8")
    part = source.split("# README: begin\n", 1)[1].split("\n\n# README: end", 1)[0].strip("\n")
    blocks = re.findall(r"```python[^\n]*\n(.*?)```", _readme(), re.S)
    assert part + "\n" in blocks


def test_every_loopwarden_command_the_readme_names_exists():
    from loopwarden.cli import COMMANDS

    named = set(re.findall(r"loopwarden (\w+)", _readme())) & {
        "up",
        "dev",
        "worker",
        "replay",
        "config",
        "tune",
        "simulate",
        "bench",
        "serve",
        "run",
        "start",
    }
    assert named <= {name for name, _ in COMMANDS}, named


def test_no_table_is_kept_in_two_documents():
    """A table row (beyond a header or rule) appears in one document only."""
    seen: dict[str, str] = {}
    twice = []
    for doc in DOCS + MORE_DOCS:
        for line in (ROOT / doc).read_text(encoding="utf-8").splitlines():
            if line.startswith("| ") and not set(line) <= set("|-: ") and line.count("|") > 2:
                if line in seen and seen[line] != doc:
                    twice.append(f"{seen[line]} and {doc}: {line[:60]}")
                seen.setdefault(line, doc)
    assert twice == []


def test_the_key_file_flags_security_md_names_are_worker_flags():
    import argparse
    import re

    from loopwarden.worker.settings import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = {opt for action in parser._actions for opt in action.option_strings}
    named = set(re.findall(r"`(--[a-z-]+-file)`", (ROOT / "deploy" / "SECURITY.md").read_text()))
    assert {"--signing-key-file", "--hash-key-file", "--sasl-password-file"} <= named
    assert named <= flags, named - flags


# ---------------------------------------------------------------- every code block runs, or says why not
#
# A fenced block's info string names its language and, for a block that cannot run here as written,
# ``fragment: REASON`` (GitHub shows only the language): ```` ```sh fragment: needs Docker ````.
# Blocks not marked so are run: `sh` (each line, with bash, in the clone, `loopwarden` from this venv),
# `console` (each `$ ` command; the lines after it are its output, compared with timings as `N s`),
# `python` (run as a script; a fragment is still compiled), `json`/`json5`/`yaml` (parsed; a config is
# checked by `config check`'s rules, with no error or warning). `text` is prose or a diagram.

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.M | re.S,
)
RUNNABLE = {"sh", "console", "python", "json", "json5", "yaml"}
LANGUAGES = RUNNABLE | {"text", "ts", "js"}  # ts, js: not run here (Node is no dependency of this test)
# Blocks another test runs as printed, finding them by their bare fence (so they carry no marker):
# (document, language) -> that test, which must exist and name the document.
ELSEWHERE = {
    ("streams/sidecar/SIDECAR.md", "js"): "tests/sidecar/test_typescript_clients.py",
    ("streams/sidecar/clients/typescript/TYPESCRIPT.md", "ts"): "tests/sidecar/test_typescript_clients.py",
    ("streams/mcpgate/MCP.md", "sh"): "tests/mcpgate/test_mcp_install.py",
}
TIMING = re.compile(r"\b\d+\.\d+ s\b")


class Block(typing.NamedTuple):
    doc: str
    line: int
    lang: str
    fragment: str | None  # the reason, for a block that is not run as written
    body: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}"


def doc_blocks() -> list[Block]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    found = []
    for doc in out.split():
        text = (ROOT / doc).read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            lang, _, rest = m.group("info").strip().partition(" ")
            rest = rest.strip()
            reason = rest.partition(":")[2].strip() if rest.startswith("fragment") else None
            body = "".join(line[len(m.group("indent")) :] for line in m.group("body").splitlines(True))
            found.append(Block(doc, text.count("\n", 0, m.start()) + 1, lang, reason, body))
    return found


BLOCKS = doc_blocks()


def test_the_fence_pattern_reads_a_fragment_and_its_reason():
    m = FENCE.search("text\n```sh fragment: needs Docker\ndocker ps\n```\n")
    assert m and m.group("info") == "sh fragment: needs Docker" and m.group("body") == "docker ps\n"
    assert len(BLOCKS) > 30 and any(b.fragment is None and b.lang == "console" for b in BLOCKS)


def test_every_block_names_its_language_and_every_fragment_its_reason():
    bad = [
        f"{b}: {b.lang or 'no language'}"
        for b in BLOCKS
        if b.lang not in LANGUAGES or (b.fragment is not None and len(b.fragment) < 10)
    ]
    bad += [
        f"{b}: {b.lang} cannot run here: mark it fragment"
        for b in BLOCKS
        if b.lang not in RUNNABLE | {"text"} and not b.fragment and (b.doc, b.lang) not in ELSEWHERE
    ]
    assert bad == []


def test_blocks_run_by_another_test_name_one_that_reads_them():
    used = {(b.doc, b.lang) for b in BLOCKS if b.fragment is None} & set(ELSEWHERE)
    for doc, lang in sorted(used):
        test = ROOT / ELSEWHERE[doc, lang]
        assert test.is_file() and Path(doc).name in test.read_text(encoding="utf-8"), (doc, lang, test)


def _runs_here(b: Block) -> bool:
    return b.fragment is None and b.lang in RUNNABLE and (b.doc, b.lang) not in ELSEWHERE


def _env() -> dict[str, str]:
    import os
    import sys

    return os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "COLUMNS": "200"}


def _commands(body: str) -> list[tuple[str, str]]:
    """A console block's (command, its output as shown)."""
    pairs: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        else:
            assert pairs, f"output before any command: {line}"
            pairs[-1][1].append(line)
    return [(cmd, "\n".join(out)) for cmd, out in pairs]


def _check_config(doc: typing.Any, where: Block) -> None:
    from loopwarden.schemas.config_check import check_document

    if isinstance(doc, dict) and {"tools", "agents", "loopwarden"} & set(doc):
        report = check_document(doc, str(where))
        assert report.errors == [] and report.warnings == [], (str(where), report)


def _bash(*args: str) -> subprocess.CompletedProcess:
    """A doc's shell code run as a reader would: from the repo, with the venv first on PATH, no stdin."""
    return subprocess.run(
        ["bash", *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize("block", [b for b in BLOCKS if _runs_here(b)], ids=str)
def test_every_block_that_is_not_a_fragment_runs_as_written(block: Block, tmp_path: Path) -> None:
    import json

    if block.lang == "json":
        _check_config(json.loads(block.body), block)
    elif block.lang == "json5":
        import pyjson5

        _check_config(pyjson5.decode(block.body), block)
    elif block.lang == "yaml":
        import yaml

        assert yaml.safe_load(block.body) is not None
    elif block.lang == "python":
        script = tmp_path / "block.py"
        script.write_text(block.body)
        out = subprocess.run(
            [_env()["PATH"].split(":")[0] + "/python", str(script)],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
    elif block.lang == "sh":
        out = _bash("-euo", "pipefail", "-c", block.body)
        assert out.returncode == 0, out.stderr
    else:
        for command, shown in _commands(block.body):
            out = _bash("-o", "pipefail", "-c", command)
            assert out.returncode == 0, (command, out.stderr)
            got = TIMING.sub("N s", out.stdout.rstrip())
            want = TIMING.sub("N s", shown.rstrip())
            assert [line.rstrip() for line in got.splitlines()] == [line.rstrip() for line in want.splitlines()], (
                command
            )


def test_every_python_block_compiles():
    import ast

    for b in BLOCKS:
        if b.lang == "python":
            compile(b.body, str(b), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)


def test_no_document_installs_loopwarden_by_name():
    """loopwarden is on no package index (and the name there is anyone's): install commands are from the clone."""
    by_name = re.compile(r"pip install\s+(?:-\w+\s+)*['\"]?loopwarden\b")
    assert by_name.search("pip install 'loopwarden[sidecar]'") and by_name.search("pip install -U loopwarden")
    assert not by_name.search("pip install '/path/to/loopwarden[mcp]'")
    found = [
        f"{name}: {m.group(0)}"
        for name in tracked_files()
        if name.endswith(".md")
        for m in by_name.finditer((ROOT / name).read_text(encoding="utf-8", errors="replace"))
    ]
    assert found == []


def test_the_readmes_replay_suggestion_shows_what_it_says():
    """The Commands table's `replay` to try, run as written: as many detections as it promises."""
    import os
    import sys

    m = re.search(r"try `(loopwarden replay [^`]+)`: (\d+) detections", _readme())
    assert m, "the README suggests no replay to try"
    argv = [sys.executable, "-m", "loopwarden.cli", *m.group(1).split()[1:]]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=os.environ | {"COLUMNS": "200"})
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert len(out.stdout.splitlines()) == int(m.group(2)) >= 10


def test_the_hooks_page_quick_start_installs_into_the_named_project_from_the_clone(tmp_path: Path) -> None:
    """HOOKS.md's first block runs in the clone (its config path is the clone's): its `hook install` line
    must reach loopwarden there (`.venv/bin`, no PATH) and write the project's settings, not the clone's."""
    import os
    import sys

    block = next(b for b in BLOCKS if b.doc == "streams/hooks/HOOKS.md")
    line = next(line for line in block.body.splitlines() if " hook install " in line).partition("#")[0]
    clone, home = tmp_path / "clone", tmp_path / "home"
    (home / "myapp").mkdir(parents=True)
    clone.mkdir()
    (clone / ".venv").symlink_to(Path(sys.executable).parent.parent)  # the clone's venv: this one
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": os.environ.get("LANG", "C.UTF-8")}
    out = subprocess.run(["bash", "-c", line], cwd=clone, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert (home / "myapp" / ".claude" / "settings.json").is_file(), out.stderr
    assert not (clone / ".claude").exists()
