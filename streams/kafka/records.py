"""What every reader needs to know of a record it cannot read: the unreadable mark.

A record that fails to parse below our code (aiokafka's record parsing: a header key that is
not UTF-8, a batch whose CRC or compression is broken, a truncated record) is handed to readers
as a mark in its place (:mod:`loopwarden.internals.aiokafka_records`): no key, no value, one
header :data:`UNREADABLE` whose value says why. Each reader skips it (the worker's events reader
dead-letters it), counts it, and its position moves past it. Defined here, below every reader,
so the config feed and the runner can recognise the mark without importing the parser's guard.
"""

from __future__ import annotations

from typing import Any

UNREADABLE = "lw-unreadable"  # header of the mark; its value: why, and the offsets it stands for


def unreadable(key: bytes | None, value: bytes | None, headers: Any) -> str | None:
    """Why a record could not be read, if (key, value, headers) is the mark of an unreadable one; else None.

    Only a record without key and value can be the mark, so a header forged on a real record
    changes nothing (a forged mark is skipped as the null record it is anyway).
    """
    if value is not None or key is not None or not headers:
        return None
    for name, data in headers.items() if hasattr(headers, "items") else headers:
        if name == UNREADABLE:
            return bytes(data or b"").decode("utf-8", "replace")
    return None
