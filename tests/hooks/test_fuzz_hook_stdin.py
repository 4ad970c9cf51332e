"""Fuzz stage: hostile hook input on the hook's stdin, for every host, against the real service.

Each case is one host's hook JSON (a prompt, a call before and after, a failure, a stop, a
compaction) mutated: fields dropped or given other types (numbers, lists, objects, null, deep
nesting, long and odd strings, lone surrogates), bytes flipped, inserted or cut, the input cut
short, made larger than the hook reads, or not JSON at all. It goes to the hook as the host
sends it (``run_hook``, the function the command runs; every few cases the installed command
itself, as a process). The hook must never raise, never take longer than its timeouts allow,
print nothing or one JSON object on stdout (the host parses it), and fail open (one line on
stderr ending "allowing") only where it must: the input is no JSON object, or the service
refused a field it cannot take (400/413). The service ends with no internal error.
Seeded; the suite runs a few seconds; ``LOOPWARDEN_FUZZ_SECONDS=300`` (and ``LOOPWARDEN_FUZZ_SEED``) runs longer.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from loopwarden.hooks import install
from loopwarden.hooks.command import MAX_INPUT, run_hook
from loopwarden.sidecar.client import SidecarClient
from loopwarden.sidecar.process import SidecarProcess
from tests.hooks.fuzzing import cases, damage, knobs

SECONDS, SEED = knobs(3, 44)
LOW = Path(__file__).resolve().parents[2] / "tests" / "data" / "low.config.json5"

CALL = {"tool_name": "Bash", "tool_input": {"command": "make test"}, "tool_use_id": "toolu_1"}
EVENTS = {
    "claude-code": [
        {"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "go", "prompt_id": "p"},
        {"hook_event_name": "PreToolUse", "session_id": "s", "prompt_id": "p", **CALL},
        {"hook_event_name": "PostToolUse", "session_id": "s", "prompt_id": "p", **CALL, "tool_response": "FAIL"},
        {"hook_event_name": "PostToolUseFailure", "session_id": "s", **CALL, "error": "exit 2"},
        {"hook_event_name": "Stop", "session_id": "s", "prompt_id": "p"},
        {"hook_event_name": "PreCompact", "session_id": "s", "trigger": "auto"},
    ],
    "codex": [
        {"hook_event_name": "UserPromptSubmit", "session_id": "s", "turn_id": "t", "prompt": "go"},
        {"hook_event_name": "PreToolUse", "session_id": "s", "turn_id": "t", **CALL},
        {"hook_event_name": "PostToolUse", "session_id": "s", "turn_id": "t", **CALL, "tool_response": {"out": 1}},
        {"hook_event_name": "Stop", "session_id": "s", "turn_id": "t"},
        {"hook_event_name": "PreCompact", "session_id": "s", "turn_id": "t", "trigger": "manual"},
    ],
    "gemini": [
        {"hook_event_name": "BeforeAgent", "session_id": "s", "prompt": "go"},
        {"hook_event_name": "BeforeTool", "session_id": "s", "tool_name": "run_shell_command", "tool_input": {"c": 1}},
        {
            "hook_event_name": "AfterTool",
            "session_id": "s",
            "tool_name": "run_shell_command",
            "tool_input": {"c": 1},
            "tool_response": {"llmContent": "Output: x\nProcess Group PGID: 42"},
        },
        {"hook_event_name": "AfterAgent", "session_id": "s"},
        {"hook_event_name": "PreCompress", "session_id": "s", "trigger": "auto"},
    ],
    "cursor": [
        {"hook_event_name": "beforeSubmitPrompt", "conversation_id": "c", "generation_id": "g", "prompt": "go"},
        {"hook_event_name": "preToolUse", "conversation_id": "c", "generation_id": "g", **CALL},
        {"hook_event_name": "beforeShellExecution", "conversation_id": "c", "generation_id": "g", "command": "ls"},
        {"hook_event_name": "beforeMCPExecution", "conversation_id": "c", "tool_name": "m", "tool_input": '{"a": 1}'},
        {"hook_event_name": "postToolUse", "conversation_id": "c", "generation_id": "g", **CALL, "tool_output": "x"},
        {"hook_event_name": "postToolUseFailure", "conversation_id": "c", **CALL, "error_message": "boom"},
        {"hook_event_name": "stop", "conversation_id": "c", "generation_id": "g"},
    ],
}
# what may make the hook fail open: no JSON object, or a field the service cannot take
MUST = re.compile(r"not a JSON object|HTTP 400|HTTP 413")


def odd_value(rng: random.Random, depth: int = 0) -> object:
    roll = rng.randrange(12)
    if roll == 0:
        return None
    if roll == 1:
        return rng.choice([0, -1, 2**63, 1e308, -0.0, True, False])
    if roll == 2:
        return "x" * rng.choice([0, 1, 257, 513, 5000, 70_000])
    if roll == 3:
        return "\ud800" + rng.choice(["", "tail", "\udfff"])  # lone surrogates
    if roll == 4:
        return rng.choice(["\x00", "\u202e", "é" * 300, "🙂" * 100, "\r\n\t", "$(rm -rf ~)"])
    if roll == 5:
        n = rng.choice([10, 65, 300])
        return json.loads("[" * n + "]" * n)
    if roll == 6 and depth < 3:
        return [odd_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if roll == 7 and depth < 3:
        return {rng.choice(["a", "", "\ud800", "k" * 300]): odd_value(rng, depth + 1) for _ in range(3)}
    if roll == 8:
        return {"big": "y" * rng.choice([70_000, 1_100_000])}
    return rng.choice(["s", "toolu_2", "Bash", "run_shell_command", "PreToolUse", "", "p"])


def mutate(rng: random.Random, event: dict) -> bytes:
    doc = dict(event)
    for _ in range(rng.randrange(1, 4)):
        roll = rng.random()
        if roll < 0.25 and doc:
            del doc[rng.choice(list(doc))]
        elif roll < 0.75:
            doc[rng.choice([*doc, "tool_input", "tool_response", "session_id", "error", "x"])] = odd_value(rng)
        else:
            other = rng.choice([h for events in EVENTS.values() for h in events])
            doc["hook_event_name"] = other["hook_event_name"]
    raw = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    roll = rng.random()
    if roll < 0.1:  # bytes flipped, inserted, cut
        return damage(rng, raw, rng.randrange(1, 6), lambda: bytes([rng.randrange(256)]), max_cut=7)
    if roll < 0.13:
        return raw[: rng.randrange(len(raw))]
    if roll < 0.15:
        return rng.choice([b"", b"null", b"[]", b'"s"', b"1e999", b"\xff\xfe", b"[" * 100_000, b" " * (MAX_INPUT + 2)])
    return raw


def check(host: str, stdin: bytes, out: str, err: str, fails: Counter) -> None:
    assert out == "" or (out.endswith("\n") and out.count("\n") == 1 and isinstance(json.loads(out), dict)), out[:300]
    if err:
        assert err.endswith("allowing\n") and err.count("\n") == 1, err
        reason = MUST.search(err)
        assert reason is not None, (host, stdin[:300], err)
        fails[reason.group(0)] += 1


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("fuzz-hook")
    sock = folder / "run" / "sidecar.sock"
    proc = SidecarProcess(
        ["--config", str(LOW), "--socket", str(sock), "--no-tcp"], log_path=folder / "sidecar.log"
    ).start()
    yield proc
    proc.stop()


def test_hostile_hook_input_never_breaks_the_hook_or_the_host(service: SidecarProcess, monkeypatch):
    monkeypatch.setenv("LOOPWARDEN_SIDECAR_URL", service.url)
    monkeypatch.setenv("LOOPWARDEN_HOOK_TIMEOUT", "5")
    rng = random.Random(SEED)
    fails: Counter = Counter()
    hosts: Counter = Counter()
    for n in cases(SECONDS, at_least=200):
        host = rng.choice(list(EVENTS))
        stdin = mutate(rng, rng.choice(EVENTS[host]))
        started = time.monotonic()
        out, err = run_hook([host], stdin)
        assert time.monotonic() - started < 20  # a few requests, each bounded by the timeout
        check(host, stdin, out, err, fails)
        hosts[host] += 1
        if (n + 1) % 50 == 0:  # the command as installed, a process: its exit code and its stdout
            argv = shlex.split(install.hook_command(host, install.build_parser().parse_args([host])))
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            proc = subprocess.run(argv, input=stdin, env=env, capture_output=True, timeout=60, cwd="/")
            assert proc.returncode == 0
            check(host, stdin, proc.stdout.decode(), proc.stderr.decode(), Counter())
    assert len(hosts) == len(EVENTS)
    with SidecarClient(service.url) as client:
        stats = client.get("/v1/stats")
    assert stats["service"]["internal_errors"] == 0 and stats["client"]["local_errors"] == 0
    assert stats["service"]["requests"] > (n + 1) // 4, (n + 1, fails)  # many cases reached the service
    assert fails["not a JSON object"] > 0  # and some were refused as they must be
