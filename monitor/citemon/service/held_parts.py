"""Kafka records holding trace parts until their trace is assembled (or let go).

A trace whose spans arrive in several Kafka records is scored once the
:class:`~citemon.otlp.assembly.TraceAssembler` completes it; until then each record with a part
of it stays unfinished (held), so no offset commits past a part whose answer has not been
scored. The assembled answer is then scored *with* those records: they finish only when it does.
A trace the assembler lets go unscored (dropped incomplete, evicted, superseded, a late part of
a trace already answered) releases its records, which then commit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from citemon.otlp.assembly import TraceAssembler
from citemon.service.entries import Entry
from citemon.service.offsets import OffsetTracker

__all__ = ["HeldParts"]


class HeldParts:
    """Per trace ID: when its first part was held, and the records holding its parts."""

    def __init__(
        self,
        tracker: OffsetTracker[Any],
        assembler: TraceAssembler,
        clock: Callable[[], float],
    ) -> None:
        self._tracker = tracker
        self._assembler = assembler
        self._clock = clock
        self._parts: OrderedDict[str, tuple[float, list[Entry[Any]]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._parts)

    def hold(self, trace_ids: Iterable[str], entry: Entry[Any]) -> None:
        """``entry`` carries a part of each of ``trace_ids``: it waits for each of them."""
        now = self._clock()
        for tid in trace_ids:
            _, held = self._parts.setdefault(tid, (now, []))
            held.append(entry)
            self._tracker.hold(entry)

    def take(self, trace_id: str | None) -> list[Entry[Any]]:
        """The records of an assembled trace (the caller releases them once it is scored)."""
        _, held = self._parts.pop(trace_id or "", (0.0, []))
        return held

    def release_let_go(self) -> None:
        """Release the records of traces the assembler no longer holds: finished, they commit."""
        for tid in [t for t in self._parts if t not in self._assembler]:
            _, held = self._parts.pop(tid)
            for e in held:
                self._tracker.release(e)

    def drop(self, tps: set[Any]) -> None:
        """Discard the traces held with a part in ``tps`` (being revoked or lost): they are never
        scored here, and their records there stay unfinished, so no offset commits past them
        and the partition's next owner assembles them again. (Spans of one trace share a
        partition when the exporter keys them by trace ID, as ``deploy/otel-collector.yaml``
        does; parts of a discarded trace elsewhere are released.)"""
        doomed = [tid for tid, (_, held) in self._parts.items() if any(e.tp in tps for e in held)]
        self._assembler.discard(doomed)
        for tid in doomed:
            _, held = self._parts.pop(tid)
            for e in held:
                if e.tp not in tps:
                    self._tracker.release(e)
