"""loopwarden: the stream processor (Faust layer, CLI) around the pure detection engine.

Kept light: the coding-agent hooks import this package on every tool call.
"""


def extra_hint(extra: str) -> str:
    """How to install an extra. loopwarden is on no package index, so never ``pip install
    'loopwarden[...]'``, which could fetch someone else's package of that name: from the clone."""
    return (
        f"in the clone: .venv/bin/pip install -e '.[{extra}]' (elsewhere: pip install '/path/to/loopwarden[{extra}]')"
    )


class UsageError(Exception):
    """Input a command cannot work with (a missing file, a busy port, a bad flag value): ``loopwarden``
    prints ``loopwarden COMMAND: <message>`` as one line and exits 2, never a traceback. The message
    names the problem and, where one helps, the flag to change."""


def tcp_port(text: str) -> int:
    """A ``--port`` value: 0-65535. Out of range, Python's ``bind`` raises (a traceback) and asyncio's
    wraps it modulo 65536 (``--port 99999`` served 34463 while clients asked 99999)."""
    import argparse

    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-65535)")
    return port
