"""The TypeScript package (streams/sidecar/clients/typescript/) with the real frameworks from npm.

Each framework's cases are a ``node --test`` file in ``tests/sidecar/clients/typescript/``, driven by the
framework's own scripted or mock model against one live ``loopwarden sidecar`` (OpenClaw's defaults with detection on:
warning at 10 identical calls, block at 20 with identical outcomes). The frameworks are installed once
into the host cache (``tests/hosts/install.py``); each case runs in a throwaway project whose
``node_modules`` holds the cached framework and a copy of the package, as a user's project would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from loopwarden.devtools.broker import free_port
from loopwarden.sidecar.client import SidecarClient
from loopwarden.sidecar.process import SidecarProcess
from tests.hosts.install import node24, npm_package

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "streams" / "sidecar" / "clients" / "typescript"
CASES = ROOT / "tests" / "sidecar" / "clients" / "typescript"
ZOD = "zod@4.6.7"
TYPESCRIPT = ("typescript@5.9.3", "@types/node@20")

# framework -> (npm specs, the cases file, node: "20" the machine's or "24" from the cache, cases that pass)
FRAMEWORKS = {
    "ai": (("ai@7.0.185", ZOD), "ai.test.mjs", "24", 9),
    "openai-agents": (("@openai/agents@0.20.0", ZOD), "openai_agents.test.mjs", "20", 8),
    "langchain": (
        ("langchain@1.5.14", "@langchain/core@1.4.0", "@langchain/langgraph@1.7.3", ZOD),
        "langchain.test.mjs",
        "20",
        10,
    ),
    "claude-agent-sdk": (("@anthropic-ai/claude-agent-sdk@0.3.337", ZOD), "claude_agent_sdk.test.mjs", "20", 7),
    "mastra": (("@mastra/core@1.71.0", ZOD), "mastra.test.mjs", "24", 10),
}


def node(version: str) -> str:
    found = shutil.which("node")
    if version == "20" and found:
        return found
    return str(node24())


def project(tmp: Path, *installs: tuple[str, ...]) -> Path:
    """A folder laid out as a user's project: the installed packages linked in from the cache, the package
    copied in as ``npm install --install-links`` puts it, and the cases beside."""
    modules = tmp / "node_modules"
    modules.mkdir(parents=True)
    for specs in installs:
        for entry in (npm_package(*specs) / "node_modules").iterdir():
            if entry.name != ".bin" and not (modules / entry.name).exists():
                (modules / entry.name).symlink_to(entry)
    shutil.copytree(PACKAGE, modules / "@loopwarden" / "client")
    for case in [*CASES.glob("*.mjs"), *CASES.glob("*.ts")]:
        shutil.copy(case, tmp / case.name)
    (tmp / "package.json").write_text('{"type": "module", "private": true}\n')
    return tmp


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ts-sidecar")
    config = tmp / "loopwarden.json"
    config.write_text(json.dumps({"tools": {"loopDetection": {"enabled": True}}}))
    sock = tmp / "lw.sock"
    # no broker: decisions are local; events wait in the bounded outbox
    args = ["--config", str(config), "--bootstrap", f"127.0.0.1:{free_port()}", "--socket", str(sock)]
    proc = SidecarProcess(args, log_path=tmp / "sidecar.log").start()
    profile_config = tmp / "profile.json"
    profile_config.write_text(
        json.dumps({"tools": {"loopDetection": {"enabled": True}}, "loopwarden": {"profile": "openclaw-latest"}})
    )
    profile_sock = tmp / "profile.sock"
    profile = SidecarProcess(
        ["--config", str(profile_config), *args[2:4], "--socket", str(profile_sock)], log_path=tmp / "profile.log"
    )
    token = tmp / "token"
    token.write_text("s3cret-token\n")
    guarded = SidecarProcess([*args[:4], "--token-file", str(token)], log_path=tmp / "guarded.log")
    try:
        guarded.start()
        profile.start()
        yield {
            "LW_PROFILE_SOCKET": str(profile_sock),
            "LW_URL": proc.url,
            "LW_SOCKET": str(sock),
            "LW_DOWN_URL": f"http://127.0.0.1:{free_port()}",
            "LW_TOKEN_URL": guarded.url,
            "LW_TOKEN": "s3cret-token",
        }
    finally:
        profile.stop()
        guarded.stop()
        proc.stop()


def run_cases(path: Path, node_version: str, env: dict[str, str], timeout: float = 300) -> str:
    proc = subprocess.run(
        [node(node_version), "--test", "--test-reporter=tap", "--test-concurrency=1", path.name],
        cwd=path.parent,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-3000:]
    return proc.stdout


def test_client_cases_pass(service, tmp_path):
    """The client alone (Node 20, no framework): transports, token, bounds, failing open."""
    out = run_cases(project(tmp_path) / "client.test.mjs", "20", service)
    assert "# fail 0" in out and "# pass 10" in out, out[-3000:]


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_framework_cases_pass(framework, service, tmp_path):
    specs, cases, node_version, passing = FRAMEWORKS[framework]
    out = run_cases(project(tmp_path, specs) / cases, node_version, service)
    assert "# fail 0" in out and f"# pass {passing}" in out, out[-3000:]
    assert re.search(r"^not ok", out, re.MULTILINE) is None, out[-3000:]


def test_the_types_compile_with_tsc(tmp_path):
    """The hand-written ``.d.ts`` files, and a user's code against them, under ``tsc --strict`` (TypeScript 5.9;
    langchain for the middleware's type)."""
    langchain = FRAMEWORKS["langchain"][0]
    root = project(tmp_path, TYPESCRIPT, langchain)
    tsc = root / "node_modules" / "typescript" / "bin" / "tsc"
    args = ["--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022"]
    args += ["--types", "node", "types.check.ts"]
    proc = subprocess.run([node("20"), str(tsc), *args], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_mastra_guard_fits_mastras_own_types(tmp_path):
    """The Mastra guard spread into a Mastra ``Agent``'s settings, under ``tsc --strict`` against @mastra/core's
    own types (``--skipLibCheck``: Mastra's bundled declarations do not compile on their own)."""
    root = project(tmp_path, TYPESCRIPT, FRAMEWORKS["mastra"][0])
    tsc = root / "node_modules" / "typescript" / "bin" / "tsc"
    args = ["--noEmit", "--strict", "--skipLibCheck", "--module", "nodenext", "--moduleResolution", "nodenext"]
    args += ["--target", "es2022", "--types", "node", "mastra.types.check.ts"]
    proc = subprocess.run([node("24"), str(tsc), *args], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_sidecar_page_javascript_example_runs_on_node_20(service, tmp_path):
    """SIDECAR.md's `gate.mjs`, as printed, against the live service and with the service down."""
    page = (ROOT / "streams" / "sidecar" / "SIDECAR.md").read_text(encoding="utf-8")
    code = re.search(r"```js\n(// gate\.mjs.*?)```", page, re.S).group(1)
    (tmp_path / "gate.mjs").write_text(code)
    with SidecarClient(service["LW_URL"]) as sc:  # the example's call is the 21st identical one of its session
        for i in range(20):
            ids = {"session_id": "s-1", "tool_call_id": f"prime-{i}"}
            sc.check("my-agent", "exec", {"command": "npm test"}, **ids)
            sc.result("my-agent", **ids, result="1 failing")
    for url, expected in ((service["LW_URL"], "block false"), (service["LW_DOWN_URL"], "allow true")):
        proc = subprocess.run(
            [node("20"), "gate.mjs"],
            cwd=tmp_path,
            env={**os.environ, "LOOPWARDEN_SIDECAR_URL": url},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0 and proc.stdout.strip() == expected, proc.stdout + proc.stderr


def service_counts(url: str) -> dict[str, int]:
    with SidecarClient(url) as sc:
        return sc.get("/v1/stats")["client"]


# TYPESCRIPT.md's heading -> (its example's framework: None for the client alone, prelude, checks, warned, blocked)
EXAMPLES = {
    "The client": (None, "client", 1, 0, 0),
    "Vercel AI SDK": ("ai", "ai", 25, 1, 5),
    "Claude Agent SDK": ("claude-agent-sdk", "claude-agent-sdk", 25, 1, 5),
    "LangChain.js v1 / LangGraph.js": ("langchain", "langchain", 25, 1, 5),
    "OpenAI Agents JS": ("openai-agents", "openai-agents", 25, 1, 5),
    "Mastra": ("mastra", "mastra", 25, 1, 5),
}


@pytest.mark.parametrize("heading", list(EXAMPLES))
def test_typescript_page_examples_run_as_printed(heading, service, tmp_path):
    """Each example of TYPESCRIPT.md, as printed, after a prelude giving what it leaves to the reader (a
    scripted model making the same call 25 times, tools whose output never changes)."""
    framework, prelude, checks, warned, blocked = EXAMPLES[heading]
    page = (PACKAGE / "TYPESCRIPT.md").read_text(encoding="utf-8")
    section = page.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```ts\n(.*?)```", section, re.S).group(1)
    specs, _cases, node_version, _n = FRAMEWORKS[framework] if framework else ((), "", "20", 0)
    root = project(tmp_path, *([specs] if specs else []))
    example = root / "example.mjs"
    example.write_text((CASES / "examples" / f"{prelude}.prelude.mjs").read_text() + "\n" + code)
    before = service_counts(service["LW_URL"])
    proc = subprocess.run(
        [node(node_version), example.name],
        cwd=root,
        env={**os.environ, "LOOPWARDEN_SIDECAR_URL": service["LW_URL"]},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    after = service_counts(service["LW_URL"])
    seen = tuple(after[k] - before[k] for k in ("checks", "warned", "blocked"))
    assert seen == (checks, warned, blocked), proc.stdout[-2000:]


def test_the_claude_agent_sdk_guard_maps_results_as_the_claude_code_hook_does(tmp_path):
    """``claudeShown`` (claude-agent-sdk.js) and the hook's ``claude_shown`` (hooks/hosts.py) are one mapping
    written in two languages: the same text for every response the model reads as text, and for the rest
    (objects sent as JSON text) the same responses equal. The guard once passed the raw object on: a saved
    large output's unique path made an identical 79 KB output never a loop."""
    from loopwarden.hooks.hosts import claude_shown

    saved = tmp_path / "saved.txt"
    saved.write_text("line é\n" * 20000)
    other = tmp_path / "other.txt"
    other.write_text("line é\n" * 19999 + "line è\n")
    cases = [
        ("Bash", {"stdout": "a\nb", "stderr": "warn", "interrupted": False, "durationMs": 5}),
        ("Bash", {"stdout": "a\nb", "stderr": "warn", "interrupted": False, "durationMs": 9}),
        ("Bash", {"stdout": "x", "stderr": "", "interrupted": True}),
        ("Bash", {"stdout": "head", "persistedOutputPath": str(saved)}),
        ("Bash", {"stdout": "head", "persistedOutputPath": str(other)}),
        ("Bash", {"stdout": "head", "persistedOutputPath": str(tmp_path / "gone.txt")}),
        ("Read", {"type": "text", "file": {"filePath": "/f", "content": "one\ntwo", "startLine": 3}}),
        ("Read", {"type": "file_unchanged", "file": {"filePath": "/f"}}),
        ("Grep", {"mode": "files_with_matches", "filenames": ["a", "b"], "numFiles": 2, "durationMs": 3}),
        ("Grep", {"mode": "files_with_matches", "filenames": [], "durationMs": 4}),
        ("Grep", {"mode": "content", "content": "a:1:x", "appliedLimit": 10, "durationMs": 1}),
        ("Glob", {"filenames": ["x", "y"], "truncated": True, "durationMs": 2}),
        ("Edit", {"filePath": "/f", "oldString": "a", "originalFile": "a", "userModified": False}),
        ("Edit", {"filePath": "/f", "oldString": "a", "originalFile": "aa", "userModified": False}),
        ("Write", {"type": "update", "filePath": "/f", "content": "new"}),
        ("mcp__files__read", {"content": "z", "uuid": "1"}),
        ("mcp__files__read", {"content": "z", "uuid": "2"}),
    ]
    expected = [claude_shown(tool, response) for tool, response in cases]
    root = project(tmp_path / "p")
    (root / "cases.json").write_text(json.dumps(cases))
    (root / "shown.mjs").write_text(
        'import { readFileSync } from "node:fs";\n'
        'import { claudeShown } from "@loopwarden/client/claude-agent-sdk";\n'
        'const cases = JSON.parse(readFileSync("cases.json", "utf8"));\n'
        "const out = [];\n"
        "for (const [tool, response] of cases) out.push(await claudeShown(tool, response));\n"
        "let deep = {};\n"
        "for (let i = 0; i < 100000; i++) deep = { next: deep };\n"
        'const kept = await claudeShown("Other", { deep, durationMs: 1 });\n'
        'if (kept === null || typeof kept !== "object" || "durationMs" in kept) throw new Error("deep: " + kept);\n'
        "console.log(JSON.stringify(out));\n"
    )
    proc = subprocess.run([node("20"), "shown.mjs"], cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    as_text = {"Bash", "Read", "Grep", "Glob"}
    for (tool, response), mine, theirs in zip(cases, got, expected, strict=True):
        if tool in as_text and not (tool == "Read" and response["type"] != "text"):
            assert mine == theirs, (tool, response)
    assert [[a == b for b in got] for a in got] == [[a == b for b in expected] for a in expected]
