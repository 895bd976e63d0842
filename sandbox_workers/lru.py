"""A least-recently-used map bounded by bytes: the result cache's and the problem store's."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["ByteLRU"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ByteLRU(Generic[K, V]):
    """A least-recently-used map bounded by the total size its callers declare.

    ``put`` evicts the least recently used entries until the new one fits; an
    entry larger than the whole budget is refused (``rejected``) rather than
    emptying the cache for nothing.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.rejected = 0

    def get(self, key: K) -> V | None:
        """The value for ``key`` (now the most recently used), or None."""
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return found[0]

    def put(self, key: K, value: V, size: int) -> bool:
        """Store ``value`` as ``size`` bytes; False when it is larger than the budget."""
        if size > self.max_bytes:
            self.rejected += 1
            return False
        self.discard(key)
        self._entries[key] = (value, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _key, (_value, evicted) = self._entries.popitem(last=False)
            self._bytes -= evicted
            self.evictions += 1
        return True

    def discard(self, key: K) -> None:
        """Forget ``key`` if present (not counted as an eviction)."""
        found = self._entries.pop(key, None)
        if found is not None:
            self._bytes -= found[1]

    @property
    def size_bytes(self) -> int:
        """The declared size of everything held."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries
