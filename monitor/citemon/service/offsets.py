"""Ordered offset tracking: a partition's offset is committed only once every record before it
is finished, so a restart re-reads what was in flight and never skips it."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Generic

from citemon.service.entries import TP, Entry, Ready

__all__ = ["OffsetTracker"]


class OffsetTracker(Generic[TP]):
    """Per-partition queues of fetched records; commits only the finished prefix."""

    def __init__(self) -> None:
        self._queues: dict[TP, deque[Entry[TP]]] = {}
        self._committed: dict[TP, int] = {}

    # -- assignment ----------------------------------------------------------------------------

    def assign(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            self._queues.setdefault(tp, deque())

    def revoke(self, tps: Iterable[TP]) -> list[Entry[TP]]:
        """Forget partitions; returns their uncommitted entries (now dead), finished or not:
        the scores sitting in finished ones are dropped uncommitted too."""
        lost: list[Entry[TP]] = []
        for tp in tps:
            for entry in self._queues.pop(tp, ()):
                entry.alive = False
                lost.append(entry)
            self._committed.pop(tp, None)
        return lost

    @property
    def partitions(self) -> list[TP]:
        return list(self._queues)

    # -- records -------------------------------------------------------------------------------

    def add(self, tp: TP, offset: int, timestamp_ms: int = -1) -> Entry[TP]:
        """A fetched record; it stays pending until :meth:`release` brings it to 0."""
        queue = self._queues.setdefault(tp, deque())
        if queue and offset <= queue[-1].offset:
            raise ValueError(f"{tp}: offset {offset} after {queue[-1].offset} (not in order)")
        entry = Entry(tp, offset, timestamp_ms)
        queue.append(entry)
        return entry

    @staticmethod
    def hold(entry: Entry[TP], n: int = 1) -> None:
        entry.pending += n

    @staticmethod
    def release(entry: Entry[TP]) -> None:
        entry.pending -= 1

    def ready(self) -> list[Ready[TP]]:
        """Per partition with progress: one past its finished prefix, and that prefix."""
        out: list[Ready[TP]] = []
        for tp, queue in self._queues.items():
            entries: list[Entry[TP]] = []
            end, need = 0, -1
            for entry in queue:
                if not entry.done:
                    break
                entries.append(entry)
                # Never end a commit between the records of one answer (Entry.commit_with).
                need = max(need, entry.commit_with)
                if need <= entry.offset:
                    end = len(entries)
            del entries[end:]
            if entries:
                out.append(Ready(tp, entries[-1].offset + 1, entries))
        return out

    def confirm(self, ready: Iterable[Ready[TP]]) -> None:
        """The offsets in ``ready`` are committed: drop those entries."""
        for r in ready:
            queue = self._queues.get(r.tp)
            if queue is None:
                continue  # revoked meanwhile
            while queue and queue[0].offset < r.offset:
                queue.popleft()
            self._committed[r.tp] = max(r.offset, self._committed.get(r.tp, 0))

    def committed(self, tp: TP) -> int | None:
        """The last offset this tracker committed for ``tp`` (None before the first commit)."""
        return self._committed.get(tp)

    def set_committed(self, tp: TP, offset: int) -> None:
        self._committed.setdefault(tp, offset)

    def unfinished(self, tps: Iterable[TP] | None = None) -> int:
        """Entries not yet finished (in the given partitions, or all)."""
        keys = self._queues if tps is None else [t for t in tps if t in self._queues]
        return sum(1 for tp in keys for e in self._queues[tp] if not e.done)

    def uncommitted(self, tp: TP) -> int:
        """Entries of ``tp`` fetched and not yet committed, finished or not."""
        return len(self._queues.get(tp, ()))

    def __len__(self) -> int:
        """Entries fetched and not yet committed, finished or not."""
        return sum(len(q) for q in self._queues.values())
