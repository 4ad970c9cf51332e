"""The OpenClaw plugin (JavaScript) against a fake decision service, with Node's own test runner.

The cases are in ``tests/openclaw_plugin/plugin.test.mjs``: ids mapped from OpenClaw's
hook context, block to ``blockReason``, timeout and errors fail open and are counted.
The machine's node runs them (the plugin needs only ``fetch`` and ``AbortSignal.timeout``,
Node >= 20); without one, Node 24 from the host cache.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "streams" / "runner" / "integrations" / "openclaw-plugin"


def node() -> str:
    found = shutil.which("node")
    if found:
        return found
    from tests.hosts.install import node24

    return str(node24())


def test_the_plugin_passes_its_node_tests():
    proc = subprocess.run(
        [node(), "--test", "--test-reporter=tap", str(ROOT / "tests" / "openclaw_plugin")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    cases = sum(f.read_text().count("\ntest(") for f in (ROOT / "tests" / "openclaw_plugin").glob("*.test.mjs"))
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
    own = [line for line in source.splitlines() if line.startswith("import ")]
    assert all(
        line.endswith(
            ('from "node:crypto";', 'from "node:fs";', 'from "node:http";', 'from "node:os";', 'from "node:path";')
        )
        for line in own
    )
    assert source.count("import ") == len(own)  # no dynamic import: Node's own modules only
