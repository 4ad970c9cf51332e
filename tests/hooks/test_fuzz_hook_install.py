"""Fuzz stage: odd and mutated settings files into ``loopwarden hook install`` and ``hook uninstall``.

Each case writes a host's settings file (a user's object with their own keys, hooks and numbers,
loopwarden's hooks from earlier installs, then mutated: bytes flipped, cut, inserted, comments,
duplicate keys, a BOM, odd numbers, lone surrogates, deep nesting, wrong shapes) and runs install,
then uninstall, in-process. Neither may raise; each either rewrites the file correctly (every key
and hook of the user's kept as it was, numbers as written, loopwarden's hooks exactly once or
gone) or leaves it byte for byte and says why in one line. Seeded; the suite runs a few seconds;
``LOOPWARDEN_FUZZ_SECONDS=300`` (and ``LOOPWARDEN_FUZZ_SEED``) runs longer.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path
from typing import Any

from loopwarden.hooks import install
from tests.hooks.fuzzing import cases, damage, knobs

SECONDS, SEED = knobs(2, 43)
NUMBERS = ["1e400", "1.0e3", "-0", "0.1", "2E+2", "123456789012345678901234567890", "-1.5e-7", "7"]
USER_COMMANDS = [
    "./my-guard.sh",
    "./notify.sh 'loopwarden hook failed'",
    "logger loopwarden hook claude-code",
    "python -m loopwarden.hooks.audit codex",
    "echo loopwarden.hooks",
]
OLD_OURS = [
    "loopwarden hook {host} --agent-id old",
    "/usr/bin/python3 -m loopwarden.hooks {host}",
    "/old/clone/.venv/bin/python -S /old/clone/streams/hooks/run.py {host} --url=http://127.0.0.1:1",
]


def tagged(text: str) -> Any:
    """The file as parsed by plain ``json``, numbers as their source text (tagged: not strings)."""
    num = lambda s: ("num", s)  # noqa: E731
    return json.loads(text, parse_float=num, parse_int=num, parse_constant=num)


def value(rng: random.Random, depth: int = 0) -> str:
    """A user's JSON value, as text."""
    roll = rng.random()
    if depth < 3 and roll < 0.25:
        items = [
            f"{json.dumps(rng.choice(['a', 'b', 'é', 'k' + str(i)]) + str(i))}: {value(rng, depth + 1)}"
            for i in range(rng.randrange(4))
        ]
        return "{" + ", ".join(items) + "}"
    if depth < 3 and roll < 0.4:
        return "[" + ", ".join(value(rng, depth + 1) for _ in range(rng.randrange(4))) + "]"
    if roll < 0.65:
        return rng.choice(NUMBERS)
    if roll < 0.75:
        return rng.choice(['"\\ud800"', '"caf\u00e9"', '"\\u0000"', '"\U0001f600"', '"line\\nbreak"'])
    return rng.choice(['"x"', "true", "false", "null", "[]", "{}"])


def handler(rng: random.Random, host: str) -> str:
    if rng.random() < 0.5:
        command = rng.choice(OLD_OURS).format(host=host)
    else:
        command = rng.choice(USER_COMMANDS)
    extra = f', "timeout": {rng.choice(NUMBERS)}' if rng.random() < 0.5 else ""
    return f'{{"type": "command", "command": {json.dumps(command)}{extra}}}'


def settings(rng: random.Random, host: str) -> str:
    events = list(install.EVENTS[host]) + ["Notification", "SessionStart"]
    hooks = []
    for event in rng.sample(events, rng.randrange(len(events))):
        if host == "cursor":
            groups = [handler(rng, host) for _ in range(rng.randrange(3))]
        else:
            groups = []
            for _ in range(rng.randrange(3)):
                inner = ", ".join(handler(rng, host) for _ in range(rng.randrange(3)))
                groups.append(f'{{"matcher": "{rng.choice(["*", "Bash", ".*"])}", "hooks": [{inner}]}}')
        hooks.append(f'"{event}": [{", ".join(groups)}]')
    keys = [f'"user{i}": {value(rng)}' for i in range(rng.randrange(5))]
    if rng.random() < 0.9:
        keys.insert(rng.randrange(len(keys) + 1), '"hooks": {' + ", ".join(hooks) + "}")
    return "{" + ", ".join(keys) + "}"


def mutate(rng: random.Random, text: str) -> str:
    roll = rng.random()
    if roll < 0.5:
        return text
    if roll < 0.6:  # bytes flipped, cut or inserted
        tokens = [b",", b"}", b"]", b'"', b"\\", b"\xff", b"// c\n", b" "]
        data = damage(rng, text.encode("utf-8"), rng.randrange(1, 4), lambda: rng.choice(tokens), max_cut=9)
        return data.decode("utf-8", "surrogateescape")
    return rng.choice(
        [
            lambda: "\ufeff" + text,
            lambda: text[:-1] + ', "user0": 1, "user0": 2}',
            lambda: text[:-1] + ", }",
            lambda: "[" + text + "]",
            lambda: (
                '{"hooks": ' + rng.choice(["[]", "1", '"x"', "null", "{}", '{"PreToolUse": {}}', '{"stop": 3}']) + "}"
            ),
            lambda: '{"deep": ' + "[" * rng.choice([50, 900, 5000]) + "]" * rng.choice([50, 900, 5000]) + "}",
            lambda: "",
            lambda: "   \n",
            lambda: "null",
            lambda: '{"n": NaN, "i": -Infinity}',
        ]
    )()


def ours(entry: Any) -> bool:
    command = entry.get("command") if isinstance(entry, dict) else None
    return isinstance(command, str) and install.our_command(command)


def handlers(group: Any) -> list:
    inner = group.get("hooks") if isinstance(group, dict) else None
    return inner if isinstance(inner, list) else [group]


def users(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list]]:
    """(the keys besides ``hooks``, each event's entries that are not loopwarden's, empty groups dropped)."""
    rest = {k: v for k, v in doc.items() if k != "hooks"}
    kept = {}
    for event, groups in (doc.get("hooks") or {}).items():
        entries = []
        for group in groups if isinstance(groups, list) else [groups]:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                inner = [h for h in group["hooks"] if not ours(h)]
                if inner or not group["hooks"]:
                    entries.append(group | {"hooks": inner})
            elif not ours(group):
                entries.append(group)
        if entries or groups == []:
            kept[event] = entries
    return rest, kept


def run(argv: list[str], remove: bool) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = install.main(argv, remove=remove)
    return code, err.getvalue()


def check_case(rng: random.Random, folder: Path) -> str:
    host = rng.choice(sorted(install.EVENTS))
    path = install.settings_file(host, folder, user=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = mutate(rng, settings(rng, host))
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    before = path.read_bytes()
    argv = [host, "--dir", str(folder), "--agent-id", f"a{rng.randrange(3)}"]
    code, err = run(argv, remove=False)
    if code != 0:
        assert code == 1 and len(err.strip().splitlines()) == 1 and err.rstrip().endswith("not changed"), err
        assert path.read_bytes() == before
        return "refused"
    after = path.read_text(encoding="utf-8")
    doc, old = tagged(after), tagged(before.decode("utf-8")) if before.strip() else {}
    rest, kept = users(doc)
    old_rest, old_kept = users(old)
    for key, val in old_rest.items():  # every user key kept, as written
        assert rest[key] == val, key
    for event, entries in old_kept.items():
        assert kept.get(event, [])[: len(entries)] == entries, event
    for event in install.EVENTS[host]:  # loopwarden's hooks once, at the end
        mine = [g for g in doc["hooks"][event] if any(map(ours, handlers(g)))]
        assert len(mine) == 1 and doc["hooks"][event][-1] == mine[0], event
    code, err = run(argv, remove=True)
    assert code == 0, err
    doc = tagged(path.read_text(encoding="utf-8"))
    assert users(doc)[0] == rest
    for event, entries in users(doc)[1].items():
        assert entries == kept[event]
    assert not any(ours(h) for groups in doc.get("hooks", {}).values() for g in groups for h in handlers(g))
    return "rewritten"


def test_odd_settings_files_are_rewritten_correctly_or_left_untouched(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(install, "precompile", lambda: 0)  # bytecode, written once per case, is not under test
    rng = random.Random(SEED)
    seen = {"refused": 0, "rewritten": 0}
    for n in cases(SECONDS, at_least=300):
        folder = tmp_path / str(n)
        folder.mkdir()
        seen[check_case(rng, folder)] += 1
    assert seen["refused"] > 10 and seen["rewritten"] > 100, seen
