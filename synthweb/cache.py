"""A least-recently-used cache bounded by the bytes it holds (rendered and compressed bodies)."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class ByteBoundedCache(Generic[V]):
    """Keeps values while their summed `size` stays under `max_bytes`; evicts the oldest first."""

    def __init__(self, max_bytes: int, size: Callable[[V], int]) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must not be negative, got {max_bytes}")
        self._max = max_bytes
        self._size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def get_or_make(self, key: Hashable, make: Callable[[], V]) -> V:
        """Return the cached value for `key`, building (and keeping, if it fits) it on a miss."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
            self.hits += 1
            return value
        self.misses += 1
        value = make()
        n = self._size(value)
        if n <= self._max:
            self._items[key] = value
            self._bytes += n
            while self._bytes > self._max:
                _, old = self._items.popitem(last=False)
                self._bytes -= self._size(old)
        return value
