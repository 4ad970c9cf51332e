"""loopwarden: the stream processor (Faust layer, CLI) around the pure detection engine.

Kept light: the coding-agent hooks import this package on every tool call.
"""


def extra_hint(extra: str) -> str:
    """How to install an extra. loopwarden is on no package index, so never ``pip install
    'loopwarden[...]'``, which could fetch someone else's package of that name: from the clone."""
    return (
        f"in the clone: .venv/bin/pip install -e '.[{extra}]' (elsewhere: pip install '/path/to/loopwarden[{extra}]')"
    )
