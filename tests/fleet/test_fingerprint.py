"""The failure fingerprint (loopwarden.fleet.fingerprint): its rules, its bounds, and its precision
and recall on a labelled corpus of real tool failures (tests/data/fingerprints.jsonl, captured by
``python -m tests.fleet.fingerprint_corpus``)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from loopwarden.fleet import fingerprint as fp

CORPUS = Path(__file__).resolve().parents[1] / "data" / "fingerprints.jsonl"
# Measured on the corpus (FLEET.md): every same-failure pair merged (111 of 111), no different pair.
# The floor leaves room for one round of one failure to fall out when the corpus is re-captured.
RECALL_FLOOR = 0.95

# (outcome, its normalized text): the examples FLEET.md shows.
EXAMPLES = [
    (
        "ENOENT: no such file or directory, access '/home/ana/.openclaw/workspace-a/missing.txt'",
        "ENOENT: no such file or directory, access '…/missing.txt'",
    ),
    (
        "curl: (7) Failed to connect to 127.0.0.1 port 41873 after 0 ms: Couldn't connect to server",
        "curl: (7) Failed to connect to 127.0.0.1 port <port> after <dur>: Couldn't connect to server",
    ),
    ("connect ECONNREFUSED 127.0.0.1:5432", "connect ECONNREFUSED 127.0.0.1:5432"),
    (
        "npm error A complete log of this run can be found in: /root/.npm/_logs/2026-12-06T03_13_40_123Z-debug-0.log",
        "npm error A complete log of this run can be found in: …/<ts>-debug-0.log",
    ),
    (
        "upstream timeout (request_id=req_8fH2kLm9QxZa77bc, trace 4bf92f3577b34da6a3ce929d0e0e4736) at 12:01:33.120Z",
        "upstream timeout (request_id=<id>, trace <id>) at <ts>",
    ),
    ("worker pid 48213 exited; retry 3 of 5 in 2.5s", "worker pid <pid> exited; retry <n> of 5 in <dur>"),
    ("bash: line 1: kill: (4770) - No such process", "bash: line 1: kill: (<pid>) - No such process"),
    ("rootdir: /srv/agents/agent-7/workspace", "rootdir: <dir>"),
    (
        '  File "/tmp/tmpk3j2h1_x/app/handlers.py", line 519, in send',
        'File "…/handlers.py", line 519, in send',
    ),
    ("Authorization: Bearer eyJhbGciOi.xyz rejected (401)", "Authorization: <redacted> rejected (401)"),
    ("Date: Sun, 06 Dec 2026 03:13:40 GMT", "Date: <ts>"),
    ("no account for ana.lima+ci@example.co.uk (password=hunter2)", "no account for <email> (password=<redacted>)"),
    ("job 123e4567-e89b-12d3-a456-426614174000 failed", "job <id> failed"),
]


@pytest.mark.parametrize(("text", "normalized"), EXAMPLES)
def test_normalize_takes_out_what_varies_between_machines_and_runs(text, normalized):
    assert fp.normalize(text) == normalized


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("HTTP 404 Not Found", "HTTP 500 Not Found"),  # status codes
        ("connect ECONNREFUSED 127.0.0.1:5432", "connect ECONNREFUSED 127.0.0.1:6379"),  # services
        ("cat: /ws/a/data/input.csv: No such file", "cat: /ws/a/data/labels.csv: No such file"),  # files
        ("test_cart.py:6: AssertionError", "test_cart.py:9: AssertionError"),  # line numbers
        ("[Errno 2] No such file", "[Errno 13] No such file"),  # errnos
        ("KeyError: 'user_id'", "KeyError: 'order_id'"),
    ],
)
def test_what_tells_failures_apart_is_kept(a, b):
    assert fp.fingerprint("exec", a) != fp.fingerprint("exec", b)


def test_the_fingerprint_names_its_version_and_its_tool():
    text = "ENOENT: no such file or directory, access '/a/missing.txt'"
    assert fp.fingerprint("read", text).startswith(f"n{fp.VERSION}:")
    assert fp.NAME == f"normalized-{fp.VERSION}"
    assert fp.fingerprint("read", text) != fp.fingerprint("exec", text)
    assert fp.fingerprint("read", text) == fp.fingerprint("read", text.replace("/a/", "/b/c/"))


@pytest.mark.parametrize(
    "hostile",
    [
        "/a" * 200_000,  # one path of 200k segments
        "a-" * 200_000 + "1",  # a token that never ends
        "1" * 400_000,
        "0x" + "f" * 400_000,
        "rootdir: " + "x" * 400_000,
        "Mon, 1 Jan " * 40_000,
        ("12:00:00 " * 50_000),
        "\\" * 400_000,
    ],
)
def test_only_a_bounded_head_and_tail_are_read(hostile):
    # Bounded: a line's characters beyond MAX_LINE_CHARS, and the lines between the first and the
    # last MAX_LINES, change nothing.
    cut = fp.bounded(hostile)
    assert len(cut) <= 2 * fp.MAX_LINES * (fp.MAX_LINE_CHARS + 1) + 2
    assert fp.normalize(hostile) == fp.normalize(cut)
    other_end = hostile[: fp.MAX_LINE_CHARS] + "z" * fp.MAX_INPUT_CHARS
    assert fp.fingerprint("exec", hostile) == fp.fingerprint("exec", other_end)
    many = "\n".join([hostile[:300]] * 20 + ["a middle line"] * 10_000 + [hostile[:300]] * 20)
    assert fp.bounded(many) == fp.bounded(many.replace("a middle line", "another middle"))
    assert len(fp.example(hostile)) <= fp.MAX_EXAMPLE_CHARS


def test_a_long_output_is_cut_at_line_breaks():
    lines = [f"line {i}: npm error see /home/agent-{i % 3}/w/x.log" for i in range(400)]
    a, b = "\n".join(lines), "\n".join(line.replace("/home/", "/srv/agents/home/") for line in lines)
    assert len(a) > fp.MAX_INPUT_CHARS and fp.normalize(a) == fp.normalize(b)


def test_a_long_output_is_told_apart_by_its_end():
    banner = "collected 1 item\n" + "\n".join(["." * 80] * 100) + "\n"
    assert fp.fingerprint("exec", banner + "E ModuleNotFoundError: x") != fp.fingerprint("exec", banner + "E KeyError")


def corpus() -> list[dict]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines()]


def pair_counts(key) -> dict[str, int]:
    """Same-failure pairs merged/missed and different-failure pairs merged/kept apart, under ``key``."""
    out = {"merged": 0, "missed": 0, "false_merges": 0, "apart": 0}
    keyed = [(r["label"], key(r)) for r in corpus()]
    for (label_a, key_a), (label_b, key_b) in itertools.combinations(keyed, 2):
        equal = key_a == key_b
        if label_a == label_b:
            out["merged" if equal else "missed"] += 1
        else:
            out["false_merges" if equal else "apart"] += 1
    return out


def test_the_corpus_holds_the_failures_a_fleet_meets_in_several_machines():
    rows = corpus()
    labels = {r["label"] for r in rows}
    for kind in ("npm-", "pip-", "pytest-", "git-", "curl-", "refused", "missing", "permission"):
        assert any(kind in label for label in labels), kind
    assert any(label.startswith("claude-code/") for label in labels)  # through a host's own shell tool
    per_label = {label: [r for r in rows if r["label"] == label] for label in labels}
    assert all(len(rs) >= 3 and len({r["round"] for r in rs}) == len(rs) for rs in per_label.values())
    # the same failure printed other bytes on other machines for most failures: the corpus is no easy case
    varied = sum(len({r["text"] for r in rs}) > 1 for rs in per_label.values())
    assert varied >= len(labels) // 2


def test_precision_and_recall_on_the_corpus():
    normalized = pair_counts(lambda r: fp.fingerprint(r["tool"], r["text"]))
    exact = pair_counts(lambda r: (r["tool"], r["text"]))
    recall = normalized["merged"] / (normalized["merged"] + normalized["missed"])
    print(f"normalized: {normalized}, recall {recall:.3f}; exact: {exact}")
    assert normalized["false_merges"] == 0  # precision 1.0: different failures never merge
    assert recall >= RECALL_FLOOR
    exact_recall = exact["merged"] / (exact["merged"] + exact["missed"])
    assert exact_recall < 0.5  # what the fleet had before: most same failures never met
