"""A small thread-safe LRU bounded by a total weight.

The memos of pure functions (the facts of a text, the JSON text of a message, the
metrics of a replay) keep their answers here: the least recently used entries are
dropped first once the entries weigh more than the limit. An entry weighs 1 unless a
``weigh`` function says otherwise (characters of a text, bytes of an encoding).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Lru"]

K = TypeVar("K")
V = TypeVar("V")


def _one(key: object, value: object) -> int:
    return 1


class Lru(Generic[K, V]):
    """Entries by key, at most ``limit`` in total weight (``weigh(key, value)``, 1 by
    default); ``hits`` and ``misses`` count the look-ups. Thread-safe."""

    def __init__(self, limit: int, weigh: Callable[[K, V], int] = _one) -> None:
        self.limit = limit
        self.weight = 0
        self.hits = self.misses = 0
        self._weigh = weigh
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self.hits += 1
            self._entries.move_to_end(key)
            return found

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` for ``key`` (a key kept already keeps its value), then drop
        the least recently used entries while the total weight is above the limit."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return
            self._entries[key] = value
            self.weight += self._weigh(key, value)
            while self.weight > self.limit:
                old_key, old = self._entries.popitem(last=False)
                self.weight -= self._weigh(old_key, old)

    def cache_clear(self) -> None:
        """Forget every entry and reset the counts."""
        with self._lock:
            self._entries.clear()
            self.weight = self.hits = self.misses = 0
