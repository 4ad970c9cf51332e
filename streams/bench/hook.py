"""Wall time of one ``loopwarden hook`` run, as a host starts it: process start to exit, service up and down.

Hyperfine-style: each command runs ``--runs`` times after ``--warmup`` runs, a fresh
process each time, with a PreToolUse input on stdin (a different call each time: a
healthy session, so the service answers ``allow`` after a full check). Beside it, the
floor: a bare interpreter start (``python -S -c pass``, ``python -c pass``). The service
is a ``loopwarden sidecar`` started here on a free port (no broker: it decides locally),
or ``--url`` of one already running; "down" points the hook at a port nobody listens on.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import loopwarden.hooks as hooks_package
from loopwarden.bench.stats import percentile
from loopwarden.hooks.install import hook_command
from loopwarden.hooks.service import Service
from loopwarden.sidecar.process import SidecarProcess

REPO_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "config" / "loopwarden.json5"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", type=int, default=40, help="timed runs per command (default 40)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--host", default="claude-code", choices=("claude-code", "codex", "gemini", "cursor"))
    p.add_argument("--config", type=Path, default=REPO_CONFIG, help="the service's config (default: the repo's)")
    p.add_argument("--url", help="a running decision service to use instead of starting one")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _input(host: str, i: int) -> bytes:
    params = {"command": f"echo step {i}"}
    if host == "gemini":
        event = {"session_id": "bench", "hook_event_name": "BeforeTool", "tool_name": "run_shell_command"}
    elif host == "cursor":
        event = {
            "conversation_id": "bench",
            "generation_id": "g",
            "hook_event_name": "preToolUse",
            "tool_name": "Shell",
        }
    else:
        event = {"session_id": "bench", "prompt_id": "p", "turn_id": "t", "hook_event_name": "PreToolUse"}
        event |= {"tool_name": "Bash", "tool_use_id": f"toolu_{i}"}
    return json.dumps(event | {"tool_input": params}).encode()


def _time(argv: list[str], env: dict[str, str], runs: int, warmup: int, host: str) -> list[float]:
    out = []
    for i in range(warmup + runs):
        t0 = time.perf_counter()
        proc = subprocess.run(argv, input=_input(host, i), env=env, capture_output=True)
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode()[-500:]}")
        if i >= warmup:
            out.append(elapsed * 1000)
    return sorted(out)


def _round_trips(url: str, n: int) -> list[float]:
    """ms per ``/v1/check`` from this process, a new connection each (as one hook run makes it)."""
    service = Service(url)
    out = []
    for i in range(n):
        body = {"agent_id": "bench", "session_id": "rt", "run_id": "rt", "tool_name": "Bash"}
        body |= {"params": {"command": f"echo {i}"}, "tool_call_id": f"rt-{i}"}
        t0 = time.perf_counter()
        if service.post("/v1/check", body) is None:
            raise SystemExit(f"the service did not answer: {service.error}")
        out.append((time.perf_counter() - t0) * 1000)
    return sorted(out)


def run(args: argparse.Namespace) -> int:
    py = sys.executable
    script = str(Path(py).with_name("loopwarden"))
    service = None
    url = args.url
    if url is None:
        service = SidecarProcess(["--config", str(args.config)]).start()
        url = service.url
    down = f"http://127.0.0.1:{_free_port()}"
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPWARDEN_")}
    tmp = tempfile.mkdtemp(prefix="lw-bench-hook-")
    os.symlink(Path(hooks_package.__file__).resolve().parents[1], Path(tmp) / "loopwarden")
    bare = {"PYTHONPATH": tmp}
    rows = []
    try:
        floor = [("python -S -c pass", [py, "-S", "-c", "pass"]), ("python -c pass", [py, "-c", "pass"])]
        for name, argv in floor:
            rows.append((name, "-", _time(argv, base_env, args.runs, args.warmup, args.host)))
        plain = argparse.Namespace(command=None, agent_id=None, url=None, token_file=None)
        installed = shlex.split(hook_command(args.host, plain))
        hooks = [
            # what `loopwarden hook install` writes: no site, the launcher loads the package itself
            (f"as installed: python -S .../hooks/run.py {args.host}", installed, {}),
            (f"python -m loopwarden.hooks {args.host}", [py, "-m", "loopwarden.hooks", args.host], {}),
            (f"loopwarden hook {args.host}", [script, "hook", args.host], {}),
        ]
        for state, target in (("up", url), ("down", down)):
            for name, argv, extra in hooks:
                env = base_env | extra | {"LOOPWARDEN_SIDECAR_URL": target}
                rows.append((name, state, _time(argv, env, args.runs, args.warmup, args.host)))
        inner = []  # the hook's own work in its process: imports and the exchange, interpreter start aside
        code = (
            "import sys, time; t = time.perf_counter(); from loopwarden.hooks.command import run_hook; "
            "run_hook(sys.argv[1:], sys.stdin.buffer.read()); print((time.perf_counter() - t) * 1000)"
        )
        trips = _round_trips(url, args.warmup + args.runs * 5)
        env = base_env | bare | {"LOOPWARDEN_SIDECAR_URL": url}
        for i in range(args.warmup + args.runs):
            proc = subprocess.run(
                [py, "-S", "-c", code, args.host], input=_input(args.host, i), env=env, capture_output=True
            )
            if i >= args.warmup:
                inner.append(float(proc.stdout))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if service is not None:
            service.stop()
    load = os.getloadavg()[0]
    print(
        f"one hook run, process start to exit ({args.runs} runs each, load average {load:.2f}, {os.cpu_count()} CPUs)"
    )
    print(f"{'command':<50} {'service':>7} {'min':>7} {'median':>7} {'p95':>7}  ms")
    for name, state, ms in rows:
        print(f"{name:<50} {state:>7} {ms[0]:7.1f} {percentile(ms, 0.5):7.1f} {percentile(ms, 0.95):7.1f}")
    print(
        f"{'round trip: one /v1/check, new connection':<50} {'up':>7} {trips[0]:7.2f} "
        f"{percentile(trips, 0.5):7.2f} {percentile(trips, 0.95):7.2f}"
    )
    inner.sort()
    print(
        f"{'in-process: import + exchange (up)':<50} {'up':>7} {inner[0]:7.1f} {percentile(inner, 0.5):7.1f} "
        f"{percentile(inner, 0.95):7.1f}"
    )
    bare_s, bare_site = percentile(rows[0][2], 0.5), percentile(rows[1][2], 0.5)
    for name, state, ms in rows[2:]:
        median = percentile(ms, 0.5)
        print(
            f"{name} ({state}): median {median - bare_s:+.1f} ms over 'python -S -c pass', "
            f"{median - bare_site:+.1f} ms over 'python -c pass'"
        )
    return 0
