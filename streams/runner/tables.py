"""A bounded map whose live entries are the last to go.

What a runner keeps per run is bounded, and a bound by recency alone lets
anyone who can make runs push a looping run's state out: 10,001 fresh runs
and the blocked run's next identical call is its first. :class:`LiveLRU`
keeps two least-recently-used tiers: entries marked live (a run with a
warning, block or abort) are evicted only when the plain tier is empty or
the live tier is over its own share (``max_live``, half the bound by
default), so a flood of plain entries never evicts a live one, and a flood
of live ones has to be bigger than the live share. Sizes in bytes are
optional (``max_bytes``) for entries whose size the caller chooses.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LiveLRU(Generic[K, V]):
    """An LRU map bounded by count (and optionally bytes) in two tiers: plain entries go first."""

    __slots__ = ("max_count", "max_live", "max_bytes", "bytes", "_plain", "_live", "_sizes")

    def __init__(self, max_count: int, max_live: int | None = None, max_bytes: int | None = None) -> None:
        self.max_count = max(1, max_count)
        self.max_live = max(1, self.max_count // 2 if max_live is None else min(max_live, self.max_count))
        self.max_bytes = max_bytes
        self.bytes = 0
        self._plain: OrderedDict[K, V] = OrderedDict()
        self._live: OrderedDict[K, V] = OrderedDict()
        self._sizes: dict[K, int] = {}

    def __len__(self) -> int:
        return len(self._plain) + len(self._live)

    def __contains__(self, key: object) -> bool:
        return key in self._plain or key in self._live

    def __iter__(self) -> Iterator[K]:
        yield from list(self._plain)
        yield from list(self._live)

    @property
    def live(self) -> int:
        return len(self._live)

    def get(self, key: K, touch: bool = True) -> V | None:
        for tier in (self._live, self._plain):
            value = tier.get(key)
            if value is not None:
                if touch:
                    tier.move_to_end(key)
                return value
        return None

    def is_live(self, key: K) -> bool:
        return key in self._live

    def put(self, key: K, value: V, size: int = 0) -> list[tuple[K, V]]:
        """Set ``key`` (newest of its tier); the entries evicted to stay within the bounds, oldest first."""
        tier = self._live if key in self._live else self._plain
        tier[key] = value
        tier.move_to_end(key)
        if self.max_bytes is not None:
            self.bytes += size - self._sizes.get(key, 0)
            self._sizes[key] = size
        return self._evict(keep=key)

    def mark_live(self, key: K) -> list[tuple[K, V]]:
        """Move ``key`` into the live tier (a no-op when absent or live already); what that evicted."""
        value = self._plain.pop(key, None)
        if value is None:
            if key in self._live:
                self._live.move_to_end(key)
            return []
        self._live[key] = value
        return self._evict(keep=key)

    def pop(self, key: K) -> V | None:
        value = self._plain.pop(key, None)
        if value is None:
            value = self._live.pop(key, None)
        if self.max_bytes is not None and value is not None:
            self.bytes -= self._sizes.pop(key, 0)
        return value

    def _over(self) -> bool:
        return len(self) > self.max_count or (self.max_bytes is not None and self.bytes > self.max_bytes)

    def _evict(self, keep: K) -> list[tuple[K, V]]:
        """Drop the oldest live entries beyond the live share, then the oldest entries (plain ones
        first, ``keep``, the entry just set, last) while over a bound."""
        out: list[tuple[K, V]] = []
        while len(self._live) > self.max_live:
            out.append(self._drop(self._live))
        while self._over():
            for tier in (self._plain, self._live):
                if tier and next(iter(tier)) != keep:
                    break
            else:  # only ``keep`` is left, and it alone is over the bytes
                tier = self._plain if self._plain else self._live
            out.append(self._drop(tier))
        return out

    def _drop(self, tier: OrderedDict[K, V]) -> tuple[K, V]:
        key, value = tier.popitem(last=False)
        if self.max_bytes is not None:
            self.bytes -= self._sizes.pop(key, 0)
        return key, value
