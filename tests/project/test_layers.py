"""The layer order of streams/ARCHITECTURE.md, read from the code's own imports.

The contracts are in pyproject.toml (``[tool.importlinter]``); ``lint-imports`` checks
them (the hooks' "standard library only" is a contract type of our own,
tests/contracts.py). Two more checks it has no contract for: no module import
circles anywhere in the package, and ``schemas/`` (a folder of its own, outside
the package folder import-linter walks) importing nothing of ours.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in edges:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_circles_finds_a_circle_and_only_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_import_circles():
    graph = grimp.build_graph("loopwarden")
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert circles(edges) == []


def test_schemas_import_nothing_of_ours_but_schemas():
    for path in (ROOT / "schemas").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            for name in names:
                assert not name.startswith("loopwarden.") or name.startswith("loopwarden.schemas"), (path, name)


def test_the_standard_library_only_contract_names_every_other_import():
    """The hooks' contract (tests/contracts.py) lets the standard library and the allowed package
    through and names anything else: a package no list foresaw, and one of ours."""
    from tests.contracts import StandardLibraryOnly

    graph = grimp.ImportGraph()
    for module in ("loopwarden", "loopwarden.hooks", "loopwarden.hooks.a", "loopwarden.hooks.b", "loopwarden.runner"):
        graph.add_module(module)
    imports = [
        ("loopwarden.hooks.a", "json"),
        ("loopwarden.hooks.a", "urllib.parse"),
        ("loopwarden.hooks.a", "loopwarden.hooks.b"),
        ("loopwarden.hooks.b", "some_new_dependency"),
        ("loopwarden.hooks.b", "loopwarden.runner"),
        ("loopwarden.runner", "msgspec"),  # outside the source: not its business
    ]
    for n, (importer, imported) in enumerate(imports, 1):
        graph.add_import(importer=importer, imported=imported, line_number=n, line_contents=f"import {imported}")
    options = {"source_modules": ["loopwarden.hooks"], "allowed_modules": ["loopwarden.hooks"]}
    check = StandardLibraryOnly("hooks", {}, options).check(graph, verbose=False)
    assert not check.kept
    assert check.metadata["broken"] == [
        ("loopwarden.hooks.b", "loopwarden.runner", [5]),
        ("loopwarden.hooks.b", "some_new_dependency", [4]),
    ]
