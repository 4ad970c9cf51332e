"""Claude Code's built-in tools (and an MCP tool) under ``loopwarden hook``, one case per row.

Each case is one headless run of identical calls. ``changer`` is a PreToolUse hook of the test's
own beside loopwarden's that changes the world before each call (a file grows, a file appears), so
identical calls get changing, non-empty output; without it they get the same output. Every
call's hooks are recorded (``hooks.log``), so a case also shows which calls no hook saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BIG = 15000  # `seq 1 15000` prints 78,894 bytes: over the hook's 64 Ki characters, so digested


@dataclass(frozen=True)
class Case:
    id: str
    tool: str  # the tool the calls name (mcp__fs__... for the MCP server's)
    args: dict[str, Any]  # {P} in a string is the project folder
    calls: int
    blocked_at: int | None  # the first call refused (1-based), None: never
    changer: str | None = None  # a shell command run before each call of ``tool``
    setup: str = ""  # a shell command run once in the project first
    first: tuple[str, dict[str, Any]] | None = None  # one call before the identical ones (a Read before Edits)
    unseen: bool = False  # Claude Code fires no hook for these calls (CLAUDE-CODE.md)
    blocked_at_in: tuple[tuple[str, int], ...] = ()  # (Claude Code version, first call refused) where it differs


MCP_READ = "mcp__fs__read_text_file"

CASES = [
    # identical calls, changing output: never blocked (30 calls, past both thresholds)
    Case("bash-changing", "Bash", {"command": "echo p >> poll.txt; wc -l < poll.txt"}, 30, None),
    Case("bash-large-changing", "Bash", {"command": f"seq 1 {BIG}; echo p >> poll.txt; wc -l < poll.txt"}, 30, None),
    Case(
        "read-changing",
        "Read",
        {"file_path": "{P}/r.txt"},
        30,
        None,
        changer="echo line >> r.txt",
        setup="echo r > r.txt",
    ),
    Case(
        "grep-changing",
        "Grep",
        {"pattern": "hit", "output_mode": "content"},
        30,
        None,
        changer="echo hit $(date +%N) >> g.txt",
    ),
    Case("glob-changing", "Glob", {"pattern": "*.log"}, 30, None, changer="touch f$(date +%s%N).log"),
    Case("mcp-changing", MCP_READ, {"path": "{P}/m.txt"}, 30, None, changer="echo m >> m.txt", setup="echo m > m.txt"),
    Case(
        "mcp-large-changing",
        MCP_READ,
        {"path": "{P}/m.txt"},
        30,
        None,
        changer="echo m $(date +%N) >> m.txt",
        setup=f"seq 1 {BIG} > m.txt",
    ),
    # identical calls, identical output: blocked at the 21st (20 identical calls and outcomes before it)
    Case("bash-same", "Bash", {"command": "cat fixed.txt"}, 22, 21, setup="echo same output > fixed.txt"),
    Case("bash-large-same", "Bash", {"command": f"seq 1 {BIG}"}, 22, 21),
    Case("bash-failing", "Bash", {"command": "echo oops; exit 3"}, 22, 21),
    # 2.1.197 answers a Read of an unchanged file "Wasted call: file unchanged since your last Read"
    # from the 2nd call: 20 alike from the 2nd, refused at the 22nd; 2.1.332 shows the file each time
    Case(
        "read-same",
        "Read",
        {"file_path": "{P}/r.txt"},
        22,
        21,
        setup="echo r > r.txt",
        blocked_at_in=(("2.1.197", 22),),
    ),
    Case("read-failing", "Read", {"file_path": "{P}/missing.txt"}, 22, 21),
    Case("grep-same", "Grep", {"pattern": "hit"}, 22, 21, setup="echo hit > g.txt"),
    Case("glob-same", "Glob", {"pattern": "*.log"}, 22, 21, setup="touch a.log"),
    # the first Write creates the file, every later one rewrites it unchanged: 20 alike from the 2nd
    Case("write-same", "Write", {"file_path": "{P}/w.txt", "content": "same\n"}, 23, 22),
    # "a" -> "ab" applies every time (the file grows), and the model reads "The file PATH has been
    # updated successfully." each time: alike, as OpenClaw's own edit result
    Case(
        "edit-same-message",
        "Edit",
        {"file_path": "{P}/e.txt", "old_string": "a", "new_string": "ab"},
        23,
        21,
        setup="echo a > e.txt",
        first=("Read", {"file_path": "{P}/e.txt"}),
    ),
    Case("mcp-same", MCP_READ, {"path": "{P}/m.txt"}, 22, 21, setup="echo m > m.txt"),
    Case("mcp-failing", MCP_READ, {"path": "{P}/missing.txt"}, 22, 21),
    # an Edit whose old_string is not in the file: refused by Claude Code before any hook, 25 times
    Case(
        "edit-failing-unseen",
        "Edit",
        {"file_path": "{P}/e.txt", "old_string": "not there", "new_string": "x"},
        26,
        None,
        setup="echo a > e.txt",
        first=("Read", {"file_path": "{P}/e.txt"}),
        unseen=True,
    ),
]
