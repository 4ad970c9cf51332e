"""Warning de-duplication by buckets of ten (§9.4)."""

from __future__ import annotations

from loopwarden.detection.state import MAX_WARNING_KEYS

BUCKET_SIZE = 10


def dedup_key(raw_run_id: str | None, warning_key: str) -> str:
    """``<runId>:<key>`` when the call has a non-empty (raw, untrimmed) run id."""
    return f"{raw_run_id}:{warning_key}" if raw_run_id else warning_key


def should_emit(buckets: dict[str, int], key: str, count: int) -> bool:
    """Emit when ``count // 10`` passes the bucket stored for ``key`` (starting at 0).

    The map keeps insertion order and at most 256 keys; updating a key does
    not move it, and the oldest inserted key is dropped first.
    """
    bucket = count // BUCKET_SIZE
    if bucket <= buckets.get(key, 0):
        return False
    buckets[key] = bucket
    if len(buckets) > MAX_WARNING_KEYS:
        del buckets[next(iter(buckets))]
    return True
