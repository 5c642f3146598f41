"""Dedupe of answers seen again (a replayed offset range, a producer retry): by trace and span
ID, over a bounded window."""

from __future__ import annotations

from collections import OrderedDict

Key = tuple[str | None, str | None]

__all__ = ["DedupeWindow", "Key"]


class DedupeWindow:
    """The last ``size`` keys seen, least recently used evicted first (0 disables it)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._keys: OrderedDict[Key, None] = OrderedDict()

    def __contains__(self, key: Key) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: Key) -> None:
        if self.size <= 0 or key == (None, None):
            return
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.size:
            self._keys.popitem(last=False)
