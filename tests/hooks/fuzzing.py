"""What the seeded fuzz stages share: their knobs, their case loop and the byte damage they do.

``LOOPWARDEN_FUZZ_SECONDS`` runs a stage longer, ``LOOPWARDEN_FUZZ_SEED`` another seed: a failure
names neither, so a stage is replayed by running it again with the same two.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator


def knobs(seconds: float, seed: int) -> tuple[float, int]:
    """The stage's run time and seed: its defaults unless the environment says otherwise."""
    return float(os.environ.get("LOOPWARDEN_FUZZ_SECONDS", seconds)), int(os.environ.get("LOOPWARDEN_FUZZ_SEED", seed))


def cases(seconds: float, at_least: int) -> Iterator[int]:
    """Case numbers 0, 1, ...: at least ``at_least`` of them, and as many more as ``seconds`` allow."""
    end = time.monotonic() + seconds
    n = 0
    while n < at_least or time.monotonic() < end:
        yield n
        n += 1


def damage(rng: random.Random, data: bytes, edits: int, insert: Callable[[], bytes], max_cut: int) -> bytes:
    """``data`` with ``edits`` random edits: a byte flipped, up to ``max_cut`` bytes cut, or ``insert()``
    put in, each at a random place."""
    out = bytearray(data)
    for _ in range(edits):
        at = rng.randrange(len(out) + 1)
        op = rng.randrange(3)
        if op == 0 and at < len(out):
            out[at] = rng.randrange(256)
        elif op == 1:
            del out[at : at + rng.randrange(1, max_cut + 1)]
        else:
            out[at:at] = insert()
    return bytes(out)
