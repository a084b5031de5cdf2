"""The decision cache of the policy backends (embedded and OPA): one class for both."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from gateway.types import Decision


class DecisionCache:
    """A bounded map of decisions by input JSON, least recently used dropped first; with a
    ``ttl`` (seconds), each is kept that long at most (OPA's: its data may change under
    it), else until it is dropped or the cache is cleared (the embedded backend's: its
    sources change only with a reload, which clears it)."""

    def __init__(self, size: int, ttl: float | None = None) -> None:
        self._size, self._ttl = size, ttl
        self._items: OrderedDict[str, tuple[float, Decision]] = OrderedDict()
        """Each decision with the ``time.monotonic()`` it expires at (inf: never)."""
        self._lock = threading.Lock()

    def get(self, key: str) -> Decision | None:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            if self._ttl is not None and found[0] < time.monotonic():
                del self._items[key]
                return None
            self._items.move_to_end(key)
            return found[1]

    def put(self, key: str, decision: Decision) -> None:
        expires = _NEVER if self._ttl is None else time.monotonic() + self._ttl
        with self._lock:
            self._items[key] = (expires, decision)
            self._items.move_to_end(key)
            if len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


_NEVER = float("inf")
