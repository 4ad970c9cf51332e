"""One built-in tool, called identically again and again by a scripted model, through a real host.

A :class:`Row` is a tool call (name and arguments, as the host's model API names them), how many
times the model makes it, a ``world(n)`` that sets up the project before the n-th call (so an
identical call can meet a changing file: a log being written, a test re-run), and where the
first refusal must land: ``None`` for a healthy row (outputs change: never refused), else the
0-based index of the first refused call (the thresholds' critical count: OpenClaw refuses the
call after ``criticalThreshold`` identical calls with identical outcomes). :func:`run_row` runs
it and checks what the model read. A refusal is told apart from a result by the verdict text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.hosts import scenarios
from tests.hosts.fake_models import FakeModelServer
from tests.hosts.harness import Host

LOW_CONFIG = """{tools: {loopDetection: {enabled: true, historySize: 30, warningThreshold: 3,
  criticalThreshold: 6, globalCircuitBreakerThreshold: 30, unknownToolThreshold: 10}}}"""
LARGE = 80_000  # characters of a large output (over the hook's 64 KiB digest bound)
CAPTURE = (  # a hook that appends its input, one line per call
    "import os, sys\nwith open(os.environ['CAPTURE'], 'a') as f:\n"
    "    f.write(sys.stdin.read().replace('\\n', ' ') + '\\n')\n"
)


@dataclass
class Row:
    name: str
    tool: str
    args: dict[str, Any] | str  # a string: a freeform tool's raw input (Codex's apply_patch)
    calls: int
    block_at: int | None  # index of the first refused call; None: never refused
    warn_at: int | None = None  # index of the call whose result carries the warning (hosts that warn after)
    world: Callable[[Path, int], None] | None = None


def lines(count: int, tail: str = "") -> str:
    return "".join(f"line {i}\n" for i in range(count)) + tail


def changing_file(name: str, large: bool = False) -> Callable[[Path, int], None]:
    """Before call n the file holds n+1 lines (or 80 KB whose last line names n): identical reads, new text."""

    def world(project: Path, n: int) -> None:
        text = ("y" * LARGE + f"\nend {n}\n") if large else lines(n + 1)
        (project / name).write_text(text)

    return world


def fixed_file(name: str, text: str) -> Callable[[Path, int], None]:
    def world(project: Path, n: int) -> None:
        (project / name).write_text(text)

    return world


def new_file_each_call(pattern: str) -> Callable[[Path, int], None]:
    """Before call n a new file ``pattern.format(n=n)`` appears: a search whose answer grows."""

    def world(project: Path, n: int) -> None:
        (project / pattern.format(n=n)).write_text(f"match {n}\n")

    return world


def run_row(host: Host, model: FakeModelServer, row: Row, prompt: str = "go") -> tuple[list[str], str]:
    """Run ``row`` in a new session of ``host``; returns the tool results the model read, in order,
    and what the host wrote on stderr."""
    model.fake.clear()
    project = host.project

    def script(n: int) -> tuple[str, Any]:
        if row.world is not None:
            row.world(project, n)
        return row.tool, (row.args if isinstance(row.args, str) else dict(row.args))

    model.fake.set(host.protocol, script, row.calls)
    proc = scenarios.run_ok(host, prompt)
    results, whole = scenarios.model_saw(model, host)
    assert len(results) == row.calls, f"{row.name}: {len(results)} results"
    refused = [i for i, text in enumerate(results) if scenarios.CRITICAL.search(text)]
    if row.block_at is None:
        assert not refused, f"{row.name}: a healthy row was refused at call {refused[0] + 1}"
        assert not scenarios.CRITICAL.search(whole)
    else:
        assert refused == list(range(row.block_at, row.calls)), f"{row.name}: refused {refused}"
        # the first refusal names the identical outcomes before it: the thresholds' critical count
        assert scenarios.CRITICAL.search(results[row.block_at]).group(1) == str(row.block_at)
    if row.warn_at is not None:
        assert scenarios.WARNING.search(results[row.warn_at]), f"{row.name}: {results[row.warn_at][:600]}"
        assert not any(scenarios.WARNING.search(t) for t in results[: row.warn_at])
    return results, proc.stderr


@dataclass
class RowHosts:
    """A module's two hosts for its rows: one at low thresholds, one at OpenClaw's defaults."""

    low: Host
    default: Host

    def for_row(self, row: Row) -> Host:
        """A row named "(default)" runs at OpenClaw's thresholds, the others at the low ones."""
        return self.default if "(default)" in row.name else self.low


def row_hosts(host_class: type[Host], tmp_path_factory, model: FakeModelServer, low_service, service) -> RowHosts:
    """Both hosts in new folders, talking to ``model``, with ``loopwarden hook`` installed against the low
    and the default service."""

    def hooked(name: str, on) -> Host:
        host = host_class(tmp_path_factory.mktemp(f"{host_class.__name__.lower()}-{name}"), model.url)
        scenarios.install_hooks(host, on.url)
        return host

    return RowHosts(hooked("low", low_service), hooked("default", service))


def run_mcp_rows(host: Host, model: FakeModelServer, read: str) -> None:
    """The filesystem MCP server's read_text_file (named ``read`` by the host): a file that grows between
    identical reads is never refused; the same text, or the same failure, is (low thresholds)."""
    run_row(host, model, Row("mcp, file grows", read, {"path": "log.txt"}, 30, None, world=changing_file("log.txt")))
    run_row(host, model, Row("mcp, same text", read, {"path": "a.txt"}, 8, 6, world=fixed_file("a.txt", "same\n")))
    run_row(host, model, Row("mcp, same failure", read, {"path": "missing.txt"}, 8, 6))
