"""The OpenClaw plugin (JavaScript) against a fake decision service, with Node's own test runner.

The cases are in ``tests/sidecar/clients/openclaw-plugin/plugin.test.mjs``: ids mapped from OpenClaw's
hook context, block to ``blockReason``, timeout and errors fail open and are counted.
The machine's node runs them (the plugin needs only ``fetch`` and ``AbortSignal.timeout``,
Node >= 20); without one, Node 24 from the host cache.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "streams" / "sidecar" / "clients" / "openclaw-plugin"
CLIENT = PLUGIN.parent / "typescript"  # @loopwarden/client: the plugin loads its modules from the checkout
CASES = ROOT / "tests" / "sidecar" / "clients" / "openclaw-plugin"


def node() -> str:
    found = shutil.which("node")
    if found:
        return found
    from tests.hosts.install import node24

    return str(node24())


def test_the_plugin_passes_its_node_tests():
    proc = subprocess.run(
        [node(), "--test", "--test-reporter=tap", str(CASES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    cases = sum(f.read_text().count("\ntest(") for f in (CASES).glob("*.test.mjs"))
    assert "# fail 0" in proc.stdout and f"# pass {cases}" in proc.stdout, proc.stdout[-2000:]


def test_the_manifest_names_the_entry_and_describes_every_setting():
    package = json.loads((PLUGIN / "package.json").read_text())
    manifest = json.loads((PLUGIN / "openclaw.plugin.json").read_text())
    assert package["type"] == "module" and "dependencies" not in package
    assert package["openclaw"]["extensions"] == ["./index.mjs"]
    assert manifest["id"] == "loopwarden"
    schema = manifest["configSchema"]
    assert schema["additionalProperties"] is False
    assert sorted(schema["properties"]) == ["agentId", "timeoutMs", "tokenFile", "url"]
    source = (PLUGIN / "index.mjs").read_text()
    # the settings the schema allows are the ones the code reads
    for key in schema["properties"]:
        assert f"cfg.{key}" in source, key
    # Node's standard library and the repo's own TypeScript client (beside the plugin), nothing else:
    # every module the plugin loads, followed through the client's own imports
    assert sorted(t for t in imports(PLUGIN / "index.mjs") if not t.startswith("node:")) == [
        "../typescript/index.js",
        "../typescript/listener.js",
    ]
    seen, todo = set(), [PLUGIN / "index.mjs"]
    while todo:
        module = todo.pop()
        seen.add(module)
        for target in imports(module):
            if target.startswith("node:"):
                continue
            found = (module.parent / target).resolve()
            assert found.parent in (PLUGIN, CLIENT), (module, target)
            if found not in seen:
                todo.append(found)
    assert {m.name for m in seen} == {"index.mjs", "index.js", "listener.js", "gate.js"}


def imports(module: Path) -> list[str]:
    """The modules `module` imports (and re-exports from); asserts there is no dynamic import."""
    source = module.read_text()
    found = re.findall(r'^(?:import|export) [^;]*? from "([^"]+)";$', source, re.M)
    assert source.count("import(") == 0, module
    assert all(t.startswith(("node:", "./", "../")) for t in found), (module, found)
    return found
