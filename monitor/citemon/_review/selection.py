"""Which answers go into a review set: the ``size`` lowest ranks of a seeded hash.

Each answer's rank is BLAKE2b of its trace ID keyed by the seed, and a set keeps the ``size``
lowest ranks seen, so the same seed picks the same answers in whatever order the records are
read (partitions interleave), memory stays bounded by ``size``, and the set is a uniform random
sample of the answers offered. An answer offered twice is kept once.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable
from typing import Final

from citemon._review.model import ReviewRecord

__all__ = ["DEFAULT_SIZE", "SeededSample"]

DEFAULT_SIZE: Final = 50
"""Answers in a review set: what one person labels in one sitting (a few claims each)."""


class SeededSample:
    """The ``size`` answers of lowest rank seen so far (rank: a hash of the trace ID keyed by
    the seed); ``size`` 0 keeps every answer."""

    def __init__(
        self, size: int, seed: int, *, services: Iterable[str] = (), versions: Iterable[str] = ()
    ) -> None:
        self.size = size
        self._key = seed.to_bytes(8, "big", signed=True)
        self._services = frozenset(services)
        self._versions = frozenset(versions)
        self._heap: list[tuple[int, str, ReviewRecord]] = []  # max-heap by rank (negated)
        self._seen: set[str] = set()
        self.read = 0
        self.matched = 0
        self.duplicates = 0

    def rank(self, trace_id: str) -> int:
        digest = hashlib.blake2b(trace_id.encode(), digest_size=8, key=self._key).digest()
        return int.from_bytes(digest, "big")

    def offer(self, record: ReviewRecord) -> None:
        self.read += 1
        if self._services and record.service not in self._services:
            return
        if self._versions and record.version not in self._versions:
            return
        if record.trace_id in self._seen:
            self.duplicates += 1
            return
        self._seen.add(record.trace_id)  # trace IDs only: bounded by what was read, small
        self.matched += 1
        item = (-self.rank(record.trace_id), record.trace_id, record)
        if not self.size or len(self._heap) < self.size:
            heapq.heappush(self._heap, item)
        elif item[:2] > self._heap[0][:2]:
            heapq.heapreplace(self._heap, item)

    def records(self) -> list[ReviewRecord]:
        """The set, lowest rank first."""
        return [record for _, _, record in sorted(self._heap, key=lambda i: (-i[0], i[1]))]
