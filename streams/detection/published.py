"""The published form of a decision: verdict and violation records, and their warning keys.

:func:`verdict_for` and :func:`violation_for` are shared by the worker and the runner's local
decisions, so both publish the same record for the same decision.

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
from typing import Any

from loopwarden.detection.enforcement import Violation
from loopwarden.schemas.verdicts import Detection, Verdict, VerdictViolation

_DIGEST = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")


def keyed_hashes(secret: bytes, warning_key: str) -> str:
    """``warning_key`` with every SHA-256 hex digest in it replaced by its HMAC under ``secret``."""
    return _DIGEST.sub(lambda m: hmac.new(secret, m.group(0).encode(), hashlib.sha256).hexdigest(), warning_key)


def verdict_for(det: Detection, event: Any, verdict_id: str, now: float, hash_key: bytes | None = None) -> Verdict:
    """The published form of an emitted detection (warning-key hashes keyed with ``hash_key`` when set)."""
    return Verdict(
        verdict_id=verdict_id,
        action=det.action,
        agent_id=event.agent_id,
        run_id=event.run_id,
        session_id=event.session_id,
        level=det.level,
        detector=det.detector,
        count=det.count,
        message=det.message,
        warning_key=det.warning_key if hash_key is None else keyed_hashes(hash_key, det.warning_key),
        tool_name=det.tool_name,
        paired_tool_name=det.paired_tool_name,
        tool_call_id=getattr(event, "tool_call_id", None),
        event_ts=event.ts,
        ts=now,
        shadow=det.shadow,
        loop_tokens=det.loop_tokens,
        loop_cost=det.loop_cost,
        origin=event.origin,
        liveness_signal=det.liveness_signal,
    )


def violation_for(found: Violation, event: Any, violation_id: str, now: float) -> VerdictViolation:
    """The published form of a violation (:mod:`loopwarden.detection.enforcement`)."""
    return VerdictViolation(
        violation_id=violation_id,
        kind=found.kind,
        verdict_id=found.verdict_id,
        agent_id=event.agent_id,
        run_id=event.run_id,
        session_id=event.session_id,
        tool_name=getattr(event, "tool_name", None),
        tool_call_id=getattr(event, "tool_call_id", None),
        event_ts=event.ts,
        ts=now,
    )
