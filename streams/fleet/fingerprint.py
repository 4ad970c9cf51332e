"""The failure fingerprint: one outcome with what varies between machines and runs taken out.

Two agents hitting the same failure rarely print the same bytes: the absolute path of
their own workspace, home or temp folder, a request id, a timestamp, a duration, a
process id or an ephemeral port differ. The fleet side (incidents, ``cross_run_repeat``)
groups outcomes by :func:`fingerprint` of their :func:`normalize`-d text instead of by
their exact hash (``loopwarden.fleet.fingerprint``, FLEET.md has the rules and examples).
The per-run rules never see it: their outcome hashes stay OpenClaw's.

Pure and bounded: the input is cut to :data:`MAX_INPUT_CHARS` first, every pattern is a
single pass whose repetitions are possessive (no backtracking), so the cost is linear in
at most that many characters. A change of the rules that moves any output is a new
:data:`VERSION`: the version is part of every fingerprint, so outcomes fingerprinted by two
versions never merge by accident, and incidents name it.
"""

from __future__ import annotations

import hashlib
import re

VERSION = 1
NAME = f"normalized-{VERSION}"  # what an incident names as its fingerprint's kind
EXACT = "exact"
MAX_INPUT_CHARS = 4096  # an outcome up to this long is read whole; of a longer one (bounded()):
MAX_LINES = 16  # its first and last lines (a tool says what failed first, a traceback last),
MAX_LINE_CHARS = 256  # each cut to this
MAX_EXAMPLE_CHARS = 256  # the normalized text an incident shows

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*+"
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*+"

# Paths: a run of /- or \-separated segments, not part of a URL (``scheme://host/...``) or a
# word. A segment stops at whitespace, quotes, brackets and ``:`` (so ``file.py:12`` keeps
# its line number outside the path).
_SEG = r"[^\s'\"`:;,()<>\[\]{}|*?/\\]++"
_PATH = re.compile(rf"(?<![\w.:/\\~<-])(?:~|[A-Za-z]:)?(?:[/\\]{_SEG})++[/\\]?+")

# Secrets first: a value after a word that names one is never kept, even in a normalized example.
_SECRET = re.compile(
    r"(?i)\b(password|passwd|pwd|token|secret|api[-_]?key|authorization|bearer|cookie)\b([\s:=\"']*+)(?:(?:Bearer|Basic|Token)\s++)?+[^\s\"',;)\]}]++"
)
# A tool's report of the folder it ran in (pytest's ``rootdir:``): the workspace itself, whose own
# name is the machine's. Its value is a path or a name, up to the next whitespace.
_DIR_KEY = re.compile(r"(?i)\b(rootdir|cachedir|configfile|cwd|workdir|working directory)(\s*+[:=]\s*+)[^\s,;]++")
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]++@[A-Za-z0-9-]++(?:\.[A-Za-z0-9-]++)++")
_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_NAMED_ID = re.compile(
    r"(?i)\b((?:x-)?(?:request|req|trace|span|correlation|session|run|job|build)[-_ ]?id)\b([\s:=\"'#]*+)[\w.:-]++"
)
_ISO = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}[:_]\d{2}(?:[:_]\d{2}(?:[.,_]\d++)?+)?+)?+(?:Z|[+-]\d{2}:?\d{2}\b)?+"
)
_DATE_WORDS = re.compile(rf"\b(?:{_DAY},?+\s++)?(?:\d{{1,2}}\s++{_MONTH}|{_MONTH}\s++\d{{1,2}}\b)(?:,?+\s++\d{{4}})?+")
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d++)?+(?:\s?+(?:Z|UTC|GMT|[+-]\d{4})\b)?+")
_EPOCH = re.compile(r"\b1[5-9]\d{8}(?:\d{3}|\.\d++)?+\b")
_DURATION = re.compile(
    r"(?i)\b\d++(?:\.\d++)?+\s?+(?:ns|us|µs|ms|s|sec|secs|seconds?|(?:milli|micro|nano)seconds?|min|mins|minutes?|h|hrs?|hours?)\b"
)
_HEX = re.compile(r"\b(?:0x)?+[0-9a-fA-F]{7,}+\b")
_TOKEN = re.compile(r"(?<![A-Za-z0-9_+-])[A-Za-z0-9_+-]{16,}+")
_PORT = re.compile(r"(?i)(?:(?<=[\w\]]):|\bport\s++)(\d{4,5})\b")
_PID = re.compile(r"(?i)\b(pid|process)\b([\s:=#]*+)\d++|(?<=\w)\[\d++\]")
_KILL = re.compile(r"(?i)\b(kill:?+\s*+\(?+)\d++")  # bash: "kill: (4770) - No such process"
_COUNTER = re.compile(r"(?i)\b(attempt|retry|retries|try|round|iteration|#)(\s*+#?+)\d++")
_OF = re.compile(r"\b\d++(\s*+(?:/|of)\s*+)\d++\b")
_LONG_NUMBER = re.compile(r"\b\d{5,}+\b|\b\d++\.\d{3,}+\b")
_TEMP_NAME = re.compile(r"^(?:tmp[._-]?+[\w-]{5,}+|pytest-of-\w++|pytest-\d++)$")
_REPEAT = re.compile(r"(<ts>)(?:[\s,T]*+<ts>)++")
_SPACE = re.compile(r"\s++")

EPHEMERAL_PORTS = 32768  # Linux's default ephemeral range starts here (others start higher)


def _path(m: re.Match[str]) -> str:
    """An absolute path as its last segment: the folders above it are the machine's and the run's."""
    text = m.group(0)
    segments = [s for s in re.split(r"[/\\]", text) if s and s != "~" and not s.endswith(":")]
    if not segments:
        return text
    last = segments[-1]
    return "…/" + ("<tmp>" if _TEMP_NAME.match(last) else last)


def _hex(m: re.Match[str]) -> str:
    text = m.group(0)
    letters = any(c in "abcdefABCDEF" for c in text.removeprefix("0x"))
    digits = any(c.isdigit() for c in text)
    return "<id>" if (letters and digits) or len(text) >= 16 else text


def _token(m: re.Match[str]) -> str:
    """A long word that mixes letters and digits is generated (a request id, a key): ``<id>``."""
    text = m.group(0)
    digits = sum(c.isdigit() for c in text)
    return "<id>" if digits >= 2 and digits < len(text) else text


def _port(m: re.Match[str]) -> str:
    port = int(m.group(1))
    if port < EPHEMERAL_PORTS or port > 65535:
        return m.group(0)
    return m.group(0)[: m.start(1) - m.start(0)] + "<port>"


def bounded(text: str) -> str:
    """At most about 8,000 characters of ``text``: all of it up to :data:`MAX_INPUT_CHARS`, else
    its first and last :data:`MAX_LINES` lines, each cut to :data:`MAX_LINE_CHARS`.

    Lines, not characters: a path of another length early in the output moves a character
    window, and the fingerprint with it, but not the lines that a window of lines holds."""
    if len(text) <= MAX_INPUT_CHARS:
        return text
    if text.count("\n") < 2 * MAX_LINES:
        lines = text.split("\n")
    else:
        lines = [*text.split("\n", MAX_LINES)[:MAX_LINES], "…", *text.rsplit("\n", MAX_LINES)[-MAX_LINES:]]
    return "\n".join(line[:MAX_LINE_CHARS] for line in lines)


def normalize(text: str) -> str:
    """``text`` (:func:`bounded`) with what varies between machines and runs replaced.

    Paths become ``…/`` and their last segment; generated ids ``<id>``; timestamps ``<ts>``;
    durations ``<dur>``; process ids ``<pid>``; ephemeral ports ``<port>``; counters and long
    numbers ``<n>``; secrets ``<redacted>``; e-mail addresses ``<email>``; runs of whitespace one space. Short numbers
    (status codes, exit codes, errnos, line numbers, well-known ports) are kept: they tell
    failures apart.
    """
    s = bounded(text)
    s = _SECRET.sub(r"\1\2<redacted>", s)
    s = _DIR_KEY.sub(r"\1\2<dir>", s)
    s = _EMAIL.sub("<email>", s)
    s = _UUID.sub("<id>", s)
    s = _NAMED_ID.sub(r"\1\2<id>", s)
    s = _PATH.sub(_path, s)
    s = _ISO.sub("<ts>", s)
    s = _DATE_WORDS.sub("<ts>", s)
    s = _CLOCK.sub("<ts>", s)
    s = _EPOCH.sub("<ts>", s)
    s = _DURATION.sub("<dur>", s)
    s = _HEX.sub(_hex, s)
    s = _TOKEN.sub(_token, s)
    s = _PORT.sub(_port, s)
    s = _PID.sub(lambda m: f"{m.group(1)}{m.group(2)}<pid>" if m.group(1) else "[<pid>]", s)
    s = _KILL.sub(r"\1<pid>", s)
    s = _COUNTER.sub(r"\1\2<n>", s)
    s = _OF.sub(r"<n>\1<n>", s)
    s = _LONG_NUMBER.sub("<n>", s)
    s = _REPEAT.sub(r"\1", s)
    return _SPACE.sub(" ", s).strip()


def fingerprint(tool: str, text: str) -> str:
    """The versioned fingerprint of a tool's outcome: ``n<VERSION>:`` and 32 hex digits."""
    digest = hashlib.sha256(f"{tool}\x00{normalize(text)}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"n{VERSION}:{digest[:32]}"


def example(text: str) -> str:
    """The normalized text an incident shows an operator (bounded; never put before a model)."""
    return normalize(text)[:MAX_EXAMPLE_CHARS]
