"""The failure fingerprint: one outcome with what varies between machines and runs taken out.

Two agents hitting the same failure rarely print the same bytes: the absolute path of
their own workspace, home or temp folder, a request id, a timestamp, a duration, a
process id or an ephemeral port differ. The fleet side (incidents, ``cross_run_repeat``)
groups outcomes by :func:`fingerprint` of their :func:`normalize`-d text instead of by
their exact hash (``loopwarden.fleet.fingerprint``, FLEET.md has the rules and examples).
The per-run rules never see it: their outcome hashes stay OpenClaw's.

Pure and bounded: the input is cut first (:func:`bounded`: about 8,000 characters at most),
every pattern is one pass whose repetitions are possessive or bounded (no backtracking, no
rescanning of a long run), so the cost is linear in what is read. A change of the rules that moves any output is a new
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

_MONTHS = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_MONTH = _MONTHS + r"[a-z]*+"
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*+"

# Every pattern starts with a literal or a character class, never with ``\b`` or a lookbehind:
# Python's engine then skips ahead to where a match can start (ten to a hundred times faster on
# plain text); where a word boundary before the match matters, the replacement checks the
# character before it. Patterns that need a keyword run only when the text has it (_GATES).

# Paths: a run of /- or \-separated segments. A segment stops at whitespace, quotes, brackets and
# ``:`` (so ``file.py:12`` keeps its line number outside the path). Not a path when glued to a
# word or part of a URL (``scheme://host/...``): see _path().
_SEG = r"[^\s'\"`:;,()<>\[\]{}|*?/\\]++"
_PATH = re.compile(rf"[/\\]{_SEG}(?:[/\\]{_SEG})*+[/\\]?+")
_GLUED = frozenset("_.:/\\<-")

# Secrets first: a value after a word that names one is never kept, even in a normalized example.
_SECRET = re.compile(
    r"([Pp]assword|[Pp]asswd|[Pp]wd|[Tt]oken|[Ss]ecret|[Aa]pi[-_]?[Kk]ey|[Aa]uthorization|[Bb]earer|[Cc]ookie"
    r"|PASSWORD|PASSWD|PWD|TOKEN|SECRET|API[-_]?KEY|AUTHORIZATION|BEARER|COOKIE)\b([\s:=\"']*+)"
    r"(?:(?:Bearer|Basic|Token)\s++)?+[^\s\"',;)\]}]++"
)
_SECRET_WORDS = ("passw", "pwd", "token", "secret", "api_key", "api-key", "apikey", "authorization", "bearer", "cookie")
# A tool's report of the folder it ran in (pytest's ``rootdir:``): the workspace itself, whose own
# name is the machine's. Its value is a path or a name, up to the next whitespace.
_DIR_KEY = re.compile(r"(rootdir|cachedir|configfile|cwd|CWD|workdir|[Ww]orking directory)(\s*+[:=]\s*+)[^\s,;]++")
_DIR_WORDS = ("rootdir", "cachedir", "configfile", "cwd", "workdir", "working directory")
_EMAIL_LOCAL = re.compile(r"[\w.+-]++$")  # matched on the text before an "@" (at most 64 characters)
_EMAIL_DOMAIN = re.compile(r"[A-Za-z0-9-]++(?:\.[A-Za-z0-9-]++)++")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_NAMED_ID = re.compile(
    r"((?:[Rr]equest|REQUEST|[Rr]eq|REQ|[Tt]race|TRACE|[Ss]pan|SPAN|[Cc]orrelation|CORRELATION|[Ss]ession|SESSION"
    r"|[Rr]un|RUN|[Jj]ob|JOB|[Bb]uild|BUILD)[-_ ]?(?:[Ii][Dd]))\b([\s:=\"'#]*+)[\w.:-]++"
)
_ISO = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}[:_]\d{2}(?:[:_]\d{2}(?:[.,_]\d++)?+)?+)?+(?:Z|[+-]\d{2}:?\d{2}\b)?+")
_HAS_MONTH = re.compile(_MONTHS)
_DATE_WORDS = re.compile(rf"(?:{_DAY},?+\s++)?(?:\d{{1,2}}\s++{_MONTH}|{_MONTH}\s++\d{{1,2}}\b)(?:,?+\s++\d{{4}})?+")
_CLOCK = re.compile(r"\d{1,2}:\d{2}:\d{2}(?:[.,]\d++)?+(?:\s?+(?:Z|UTC|GMT|[+-]\d{4})\b)?+")
_EPOCH = re.compile(r"1[5-9]\d{8}(?:\d{3}|\.\d++)?+\b")
# Bounded digit runs where a match may fail after them: a failed attempt costs a few characters, not
# the rest of a long run of digits (which would make a text of digits quadratic).
_DURATION = re.compile(
    r"\d{1,6}+(?:\.\d{1,6}+)?+\s?+(?:ns|us|µs|ms|s|sec|secs|seconds?|(?:milli|micro|nano)seconds?|min|mins|minutes?"
    r"|h|hrs?|hours?)\b"
)
_HEX = re.compile(r"(?:0x)?+[0-9a-fA-F]{7,}+")
_TOKEN = re.compile(r"[A-Za-z0-9_+-]{16,}+")
_COLON_PORT = re.compile(r":(\d{4,5})\b")
_WORD_PORT = re.compile(r"[Pp]ort\s++(\d{4,5})\b")
_PID = re.compile(r"([Pp][Ii][Dd]|[Pp]rocess)\b([\s:=#]*+)\d++")
_BRACKET_PID = re.compile(r"\[\d++\]")
_KILL = re.compile(r"(kill:?+\s*+\(?+)\d++")  # bash: "kill: (4770) - No such process"
_COUNTER = re.compile(r"([Aa]ttempt|[Rr]etry|[Rr]etries|[Tt]ry|[Rr]ound|[Ii]teration|#)(\s*+#?+)\d++")
_COUNTER_WORDS = ("attempt", "retr", "try ", "try#", "round", "iteration", "#")
_ID_WORDS = ("request", "req", "trace", "span", "correlation", "session", "run", "job", "build")
_ID_ENDS = ("id ", "id:", "id=", 'id"', "id'", "id#", "id\t")
_OF = re.compile(r"\d{1,4}+(\s*+(?:/|of)\s*+)\d{1,4}+\b")
_LONG_NUMBER = re.compile(r"\d{5,}+|\d++\.\d{3,}+")
_TEMP_NAME = re.compile(r"^(?:tmp[._-]?+[\w-]{5,}+|pytest-of-\w++|pytest-\d++)$")
_REPEAT = re.compile(r"(<ts>)(?:[\s,T]*+<ts>)++")

EPHEMERAL_PORTS = 32768  # Linux's default ephemeral range starts here (others start higher)


def _before(m: re.Match[str]) -> str:
    """The character before a match ("" at the start)."""
    return m.string[m.start() - 1] if m.start() else ""


def _path(m: re.Match[str]) -> str:
    """An absolute path as its last segment: the folders above it are the machine's and the run's."""
    text = m.group(0)
    before = _before(m)
    if before.isalnum() or before in _GLUED:  # a word's part, a URL's (``://``), a closing tag's
        at = m.start()
        drive = before == ":" and at >= 2 and m.string[at - 2].isalpha() and (at == 2 or not m.string[at - 3].isalnum())
        if not drive:
            return text
    segments = [s for s in re.split(r"[/\\]", text) if s]
    if not segments:
        return text
    last = segments[-1]
    return "…/" + ("<tmp>" if _TEMP_NAME.match(last) else last)


def _hex(m: re.Match[str]) -> str:
    text, end = m.group(0), m.end()
    if _word_char(_before(m)) or (end < len(m.string) and _word_char(m.string[end])):
        return text
    letters = any(c in "abcdefABCDEF" for c in text.removeprefix("0x"))
    digits = any(c.isdigit() for c in text)
    return "<id>" if (letters and digits) or len(text) >= 16 else text


def _word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def _token(m: re.Match[str]) -> str:
    """A long word that mixes letters and digits is generated (a request id, a key): ``<id>``."""
    text = m.group(0)
    digits = sum(c.isdigit() for c in text)
    return "<id>" if digits >= 2 and digits < len(text) else text


def _port(m: re.Match[str]) -> str:
    port = int(m.group(1))
    if (
        port < EPHEMERAL_PORTS
        or port > 65535
        or (m.group(0)[0] == ":" and not (_word_char(_before(m)) or _before(m) == "]"))
    ):
        return m.group(0)
    return m.group(0)[: m.start(1) - m.start(0)] + "<port>"


def _if_word_starts(repl: str):
    """A replacement applied only where the match starts a word (``try 3``, not ``entry 3``)."""

    def sub(m: re.Match[str]) -> str:
        return m.group(0) if _word_char(_before(m)) else m.expand(repl)

    return sub


def _emails(s: str) -> str:
    """E-mail addresses as ``<email>``: found from their ``@`` (one pass; a local part is 64 characters at most)."""
    out, done, at = [], 0, s.find("@")
    while at >= 0:
        local = _EMAIL_LOCAL.search(s, max(done, at - 64), at)
        domain = _EMAIL_DOMAIN.match(s, at + 1)
        if local is not None and domain is not None:
            out += (s[done : local.start()], "<email>")
            done = domain.end()
        at = s.find("@", max(at + 1, done))
    return "".join(out) + s[done:] if out else s


_DUR_SUB = _if_word_starts("<dur>")
_PID_SUB = _if_word_starts(r"\1\2<pid>")
_COUNTER_SUB = _if_word_starts(r"\1\2<n>")
_OF_SUB = _if_word_starts(r"<n>\1<n>")


def _epoch(m: re.Match[str]) -> str:
    return m.group(0) if _before(m).isdigit() else "<ts>"


def _bracket_pid(m: re.Match[str]) -> str:
    return "[<pid>]" if _word_char(_before(m)) else m.group(0)


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
    numbers ``<n>``; secrets ``<redacted>``; e-mail addresses ``<email>``; runs of whitespace one
    space. Short numbers (status codes, exit codes, errnos, line numbers, well-known ports) are
    kept: they tell failures apart.
    """
    s = bounded(text)
    low = s.lower()
    if any(w in low for w in _SECRET_WORDS):
        s = _SECRET.sub(r"\1\2<redacted>", s)
    if any(w in low for w in _DIR_WORDS):  # the patterns spell out the cases they match
        s = _DIR_KEY.sub(r"\1\2<dir>", s)
    if "@" in s:
        s = _emails(s)
    if "-" in s:
        s = _UUID.sub("<id>", s)
    if any(e in low for e in _ID_ENDS) and any(w in low for w in _ID_WORDS):
        s = _NAMED_ID.sub(r"\1\2<id>", s)
    if "/" in s or "\\" in s:
        s = _PATH.sub(_path, s)
    if "-" in s:
        s = _ISO.sub("<ts>", s)
    if _HAS_MONTH.search(s):
        s = _DATE_WORDS.sub("<ts>", s)
    if ":" in s:
        s = _CLOCK.sub("<ts>", s)
    s = _EPOCH.sub(_epoch, s)
    s = _DURATION.sub(_DUR_SUB, s)
    s = _HEX.sub(_hex, s)
    s = _TOKEN.sub(_token, s)
    if ":" in s:
        s = _COLON_PORT.sub(_port, s)
    if "port" in low:
        s = _WORD_PORT.sub(_port, s)
    if "pid" in low or "process" in low:
        s = _PID.sub(_PID_SUB, s)
    if "[" in s:
        s = _BRACKET_PID.sub(_bracket_pid, s)
    if "kill" in low:
        s = _KILL.sub(r"\1<pid>", s)
    if any(w in low for w in _COUNTER_WORDS):
        s = _COUNTER.sub(_COUNTER_SUB, s)
    if "/" in s or "of" in low:
        s = _OF.sub(_OF_SUB, s)
    s = _LONG_NUMBER.sub("<n>", s)
    if "<ts>" in s:
        s = _REPEAT.sub(r"\1", s)
    return " ".join(s.split())


def fingerprint(tool: str, text: str) -> str:
    """The versioned fingerprint of a tool's outcome: ``n<VERSION>:`` and 32 hex digits."""
    digest = hashlib.sha256(f"{tool}\x00{normalize(text)}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"n{VERSION}:{digest[:32]}"


def example(text: str) -> str:
    """The normalized text an incident shows an operator (bounded; never put before a model)."""
    return normalize(text)[:MAX_EXAMPLE_CHARS]
