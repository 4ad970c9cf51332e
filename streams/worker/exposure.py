"""What the worker publishes about a call's arguments and results, kept unguessable when asked to.

Warning keys carry SHA-256 digests of a call's canonical arguments and of its
outcome (``generic:<tool>:<argsHash>:<resultHash>``). Every runner reads the
control topic, and an unsalted digest of a small space (a 6-digit code, a
yes/no answer) is recovered by trying every candidate. With a secret
(``hash_key``) each digest in a published key becomes HMAC-SHA256(secret,
digest): still equal for equal calls (a key stays a key), useless without
the secret. Detection and ``loopwarden replay`` use the plain digests, as
OpenClaw does; only the published copy changes.
"""

from __future__ import annotations

import hashlib
import hmac
import re

_DIGEST = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


def keyed_hashes(secret: bytes, warning_key: str) -> str:
    """``warning_key`` with every SHA-256 hex digest in it replaced by its HMAC under ``secret``."""
    return _DIGEST.sub(lambda m: hmac.new(secret, m.group(0).encode(), hashlib.sha256).hexdigest(), warning_key)
