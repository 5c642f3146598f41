"""The ledger: every consumed record from fetch to commit, and where intake stands per partition.

It is the only writer of that state. Intake, the answer jobs, recovery and the rebalance
callbacks ask it to change (:meth:`Ledger.take`, :meth:`Ledger.finish_answer`,
:meth:`Ledger.revoke`…); nothing else touches a record's entry or a partition's position.

The invariant it keeps: a partition's offset is committed only over the *finished prefix* of
its records, so a restart re-reads what was in flight and never skips it. Answers finish out of
order (a slow judge call, a retry), so each partition keeps a queue of its records in fetch
order; the committable offset is one past the longest finished prefix. Gaps in the offsets
(compaction, transaction markers) need no special case: the queue holds records, not integers.
An answer is carried by the record with the highest offset among those it came from, so it is
produced and counted with that offset's commit (its other records of that partition commit with
it, never before), and only once it is confirmed (:meth:`Ledger.confirm`, with no ``await``
between the commit and the counting).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict, deque
from collections.abc import Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from citemon._core.records import AnswerScore
from citemon._service.lifecycle import Signal
from citemon._service.outputs import OutMessage

__all__ = ["Entry", "Finished", "Key", "Ledger", "Ready"]

Key = tuple[str | None, str | None]
"""An answer's identity: (trace ID, span ID)."""


@dataclass(frozen=True, slots=True)
class Finished:
    """A scored answer waiting for its record's commit."""

    score: AnswerScore
    span_id: str | None

    @property
    def key(self) -> Key:
        return (self.score.trace_id, self.span_id)


@dataclass(slots=True, eq=False)
class Entry:
    """One consumed Kafka record and what finishing it produced (read it; the ledger writes it).

    ``pending`` counts what still holds the record (its intake, each answer job, each trace part
    waiting for the rest of its trace); the record is finished at 0. ``alive`` turns false when
    its partition is revoked: late finishers then change nothing.
    """

    tp: Any
    offset: int
    timestamp_ms: int = -1
    pending: int = 1
    messages: list[OutMessage] = field(default_factory=list)
    answers: list[Finished] = field(default_factory=list)
    dead_letters: list[str] = field(default_factory=list)
    held: list[OutMessage] = field(default_factory=list)
    """Changes to the held-parts store (:mod:`citemon._service.held`) made with this commit."""
    alive: bool = True
    commit_with: int = -1
    """The offset of the record this one must commit with (or after): a trace's parts in
    several records of one partition carry their answer on the last of them, so no commit may
    end between them (a revoke there left the next owner the later parts only, and the answer
    was never counted); -1 = none."""

    @property
    def done(self) -> bool:
        return self.pending <= 0


@dataclass(slots=True)
class Ready:
    """A partition's committable offset, the finished entries below it (in offset order) and
    the answers they carry that are to be counted (not committed before)."""

    tp: Any
    offset: int
    entries: list[Entry]
    counted: list[Finished] = field(default_factory=list)
    cuts: list[tuple[str, str]] = field(default_factory=list)
    """What was cut of the records produced with this commit, as (record, reason) pairs
    (:mod:`citemon._service.outputs`): counted once it succeeded."""
    duplicates: int = 0
    """Answers left out of ``counted`` as counted before: counted once it succeeded (a failed
    commit's entries are offered again by the next :meth:`Ledger.ready`)."""


class _Partition:
    """The ledger's state of one assigned partition."""

    __slots__ = ("committed", "floor", "opening", "queue", "revoking", "seeks", "taken_to")

    def __init__(self, *, opening: bool) -> None:
        self.queue: deque[Entry] = deque()
        self.committed: int | None = None
        # Opening: its transactional producer is not open yet (records ignored); once open,
        # the committed offset read after fencing the previous owner is the floor.
        self.opening = opening
        self.floor = -1
        self.revoking = False
        self.taken_to: int | None = None  # one past the last record taken
        self.seeks = 0


class Ledger:
    """Per partition, the records fetched and not committed; per answer, whether it was counted.

    Every change it makes wakes :meth:`changed`'s waiters (:meth:`caught_up
    <citemon._service.pipeline.Pipeline.caught_up>`); nothing outside notifies for it.
    """

    def __init__(self, *, dedupe_window: int = 100_000) -> None:
        self._records = 0
        self._duplicates = 0
        self._rebalances = 0
        self._parts: dict[Any, _Partition] = {}
        self._counted: OrderedDict[Key, None] = OrderedDict()
        self._dedupe_window = dedupe_window
        self._changed = Signal()
        # Positions move only when getmany returns or raises, or on a seek: counted, so a check
        # spanning an await can tell they stood still. ``taking``: a fetch is being taken.
        self._moved = 0
        self._taking = False

    # -- counts --------------------------------------------------------------------------------

    @property
    def records(self) -> int:
        """Records taken (fetched from a readable partition, above its floor)."""
        return self._records

    @property
    def duplicates(self) -> int:
        """Answers left out of a confirmed commit because one with the same key was counted
        already."""
        return self._duplicates

    @property
    def rebalances(self) -> int:
        """Rebalances begun (:meth:`rebalance`): a change intake watches across a yield."""
        return self._rebalances

    def rebalance(self) -> None:
        """A rebalance begins (before anything is revoked): records taken after a yield may
        belong to partitions about to go."""
        self._rebalances += 1

    # -- change notification -------------------------------------------------------------------

    def changed(self) -> Coroutine[Any, Any, bool]:
        """Await this to return at the next change of the ledger after the call (a record, a
        partition, a position, a commit), not after the first await: a change while the caller
        awaits something else between counts."""
        return self._changed.wait()

    # -- partitions ----------------------------------------------------------------------------

    @property
    def assigned(self) -> frozenset[Any]:
        """The partitions this replica owns (being revoked included)."""
        return frozenset(self._parts)

    @property
    def opening(self) -> list[Any]:
        """Assigned partitions whose producer is not open yet, by partition number."""
        return sorted((tp for tp, p in self._parts.items() if p.opening), key=_order)

    @property
    def settled(self) -> bool:
        """Assigned, none still opening nor being revoked."""
        return bool(self._parts) and not any(p.opening or p.revoking for p in self._parts.values())

    def readable(self, tp: Any) -> bool:
        """Whether records of ``tp`` may be taken now: ours, open and not being revoked."""
        p = self._parts.get(tp)
        return p is not None and not p.opening and not p.revoking

    def all_readable(self) -> list[Any]:
        """The readable partitions, by partition number."""
        return sorted((tp for tp in self._parts if self.readable(tp)), key=_order)

    def assign(self, tps: Iterable[Any], *, opening: bool) -> None:
        """``tps`` are ours now; a new owner's intake starts at the committed offset."""
        for tp in tps:
            p = self._parts.setdefault(tp, _Partition(opening=opening))
            p.taken_to = None
            p.revoking = False
            p.opening = p.opening or opening
        self._changed.notify()

    def opened(self, tp: Any, committed: int | None) -> None:
        """``tp``'s producer is open and the partition sought to ``committed`` (None: the log
        start): records below it, fetched before the seek, are ignored."""
        p = self._parts.get(tp)
        if p is None:
            return
        if committed is not None:
            p.floor = committed
            if p.committed is None:
                p.committed = committed
        p.opening = False
        self._changed.notify()

    def start_revoking(self, tps: Iterable[Any]) -> None:
        """Take no more records of ``tps`` (they are being revoked, or lost)."""
        for tp in tps:
            if tp in self._parts:
                self._parts[tp].revoking = True
        self._changed.notify()

    def revoking(self, tps: set[Any]) -> bool:
        """Whether any of ``tps`` is being revoked."""
        return any(self._parts[tp].revoking for tp in tps if tp in self._parts)

    def drop(self, tps: Iterable[Any]) -> list[Entry]:
        """Forget the uncommitted records of ``tps`` (now dead), finished or not; the answers
        sitting in finished ones are dropped uncounted too. The partitions stay assigned."""
        lost: list[Entry] = []
        for tp in tps:
            p = self._parts.get(tp)
            if p is None:
                continue
            for entry in p.queue:
                entry.alive = False
                lost.append(entry)
            p.queue.clear()
            p.committed = None
        self._changed.notify()
        return lost

    def remove(self, tps: Iterable[Any]) -> None:
        """``tps`` are revoked: forget them (:meth:`drop` their records first)."""
        for tp in tps:
            self._parts.pop(tp, None)
        self._changed.notify()

    # -- positions -----------------------------------------------------------------------------

    @property
    def moved(self) -> int:
        """How often positions moved (a fetch returned or raised, a seek)."""
        return self._moved

    @property
    def taking(self) -> bool:
        """Whether a fetch is being taken (positions are ahead of the records taken)."""
        return self._taking

    def fetched(self) -> None:
        """``getmany`` returned or raised: the consumer's positions may have moved."""
        self._moved += 1
        self._changed.notify()

    @contextlib.contextmanager
    def taking_fetch(self) -> Iterator[None]:
        """Around taking one fetch's records."""
        self._taking = True
        try:
            yield
        finally:
            self._taking = False
            self._changed.notify()

    def sought(self, tp: Any) -> None:
        """``tp`` was sought: records of it fetched before are stale."""
        p = self._parts.get(tp)
        if p is not None:
            p.seeks += 1
        self._moved += 1
        self._changed.notify()

    def seeks(self, tp: Any) -> int:
        """How often ``tp`` was sought since it was assigned (a fetch made before a seek is
        stale there)."""
        p = self._parts.get(tp)
        return 0 if p is None else p.seeks

    def taken_to(self, tp: Any) -> int | None:
        """One past the last record of ``tp`` taken since it was assigned."""
        p = self._parts.get(tp)
        return None if p is None else p.taken_to

    # -- records -------------------------------------------------------------------------------

    def take(self, tp: Any, offset: int, timestamp_ms: int = -1) -> Entry | None:
        """A fetched record, pending until :meth:`release` brings it to 0; None when ``tp`` is
        not readable now (fetched before a revoke: the next owner reads it from the committed
        offset) or the record is below its floor (fetched before the seek to the offset
        committed under the last owner)."""
        if not self.readable(tp):
            return None
        p = self._parts[tp]
        if offset < p.floor:
            return None
        self._records += 1
        p.taken_to = offset + 1
        return self._add(p, tp, offset, timestamp_ms)

    def skip_batch(self, tp: Any, next_offset: int, message: OutMessage, reason: str) -> None:
        """An undecodable batch ending before ``next_offset``: one finished entry at its last
        offset carries its dead letter, so the commit moves past the whole batch once
        everything before it is finished."""
        p = self._parts[tp]
        p.taken_to = next_offset
        entry = self._add(p, tp, next_offset - 1, -1)
        self._dead_letter(entry, message, reason)
        self.release(entry)

    def anchor(self, tp: Any) -> Entry | None:
        """An entry backed by no record, at ``tp``'s position (one past the last record taken,
        or the committed offset): what commits with it (a trace's answer settled by its window,
        a held-parts tombstone) goes out with the next commit once everything taken before it
        is finished, at an offset already reached. Pending until :meth:`release`; None when
        ``tp`` is not readable or its position is unknown."""
        if not self.readable(tp):
            return None
        p = self._parts[tp]
        position = p.taken_to if p.taken_to is not None else p.committed
        if position is None or position <= 0:
            return None
        return self._add(p, tp, position - 1, -1, anchor=True)

    def _add(
        self, p: _Partition, tp: Any, offset: int, timestamp_ms: int, *, anchor: bool = False
    ) -> Entry:
        if p.queue and (
            offset < p.queue[-1].offset or (offset == p.queue[-1].offset and not anchor)
        ):
            raise ValueError(f"{tp}: offset {offset} after {p.queue[-1].offset} (not in order)")
        entry = Entry(tp, offset, timestamp_ms)
        p.queue.append(entry)
        return entry

    @staticmethod
    def hold(entry: Entry, n: int = 1) -> None:
        """One more thing (an answer job, a trace part) holds ``entry`` unfinished."""
        entry.pending += n

    def release(self, entry: Entry) -> None:
        """One holder of ``entry`` is done with it."""
        entry.pending -= 1
        self._changed.notify()

    def dead_letter(self, entry: Entry, message: OutMessage, reason: str) -> None:
        """Put ``message`` on the dead-letter topic with ``entry``'s commit."""
        self._dead_letter(entry, message, reason)

    @staticmethod
    def _dead_letter(entry: Entry, message: OutMessage, reason: str) -> None:
        entry.messages.append(message)
        entry.dead_letters.append(reason)

    def finish_answer(self, entries: list[Entry], answer: Finished) -> None:
        """An answer is scored: it rides on its last live record (to be produced and counted
        with that offset's commit) and its records are released. An answer whose records all
        died (revoked, lost) is counted by the partition's next owner, not here."""
        home = max((e for e in entries if e.alive), key=lambda e: e.offset, default=None)
        if home is not None:
            home.answers.append(answer)
            for e in entries:  # the answer's records of one partition commit together
                if e.tp == home.tp and e is not home:
                    e.commit_with = max(e.commit_with, home.offset)
        self.release_all(entries)

    def fail_answer(self, entries: list[Entry], message: OutMessage, reason: str) -> None:
        """An answer could not be scored: it is dead-lettered with its last record, and its
        records released."""
        if entries:
            self._dead_letter(entries[-1], message, reason)
        self.release_all(entries)

    def release_all(self, entries: Iterable[Entry]) -> None:
        for e in entries:
            e.pending -= 1
        self._changed.notify()

    # -- commits -------------------------------------------------------------------------------

    def seen(self, key: Key) -> bool:
        """Whether the answer ``key`` was counted here already (within the window)."""
        return key != (None, None) and key in self._counted

    def ready(self, tps: Iterable[Any] | None = None) -> list[Ready]:
        """Per partition with progress (of ``tps``, or all), one past its finished prefix, the
        prefix, and its answers to count: those not counted before (by key, in the window and
        within this call; a replayed offset range, a producer retry)."""
        out: list[Ready] = []
        keys: set[Key] = set()
        wanted = self._parts if tps is None else [tp for tp in tps if tp in self._parts]
        for tp in wanted:
            entries: list[Entry] = []
            end, need = 0, -1
            for entry in self._parts[tp].queue:
                if not entry.done:
                    break
                entries.append(entry)
                # Never end a commit between the records of one answer (Entry.commit_with).
                need = max(need, entry.commit_with)
                if need <= entry.offset:
                    end = len(entries)
            del entries[end:]
            if not entries:
                continue
            counted: list[Finished] = []
            duplicates = 0
            for e in entries:
                for answer in e.answers:
                    key = answer.key
                    if key != (None, None) and (key in self._counted or key in keys):
                        duplicates += 1
                        continue
                    keys.add(key)
                    counted.append(answer)
            out.append(Ready(tp, entries[-1].offset + 1, entries, counted, duplicates=duplicates))
        return out

    def confirm(self, r: Ready) -> None:
        """``r`` committed: forget its entries and remember its answers as counted."""
        p = self._parts.get(r.tp)
        if p is not None:  # else revoked meanwhile
            # The committed prefix, by identity: an anchor (:meth:`anchor`) behind it may share
            # its last offset and still be pending.
            committed = {id(e) for e in r.entries}
            while p.queue and id(p.queue[0]) in committed:
                p.queue.popleft()
            p.committed = max(r.offset, p.committed or 0)
        for answer in r.counted:
            self._remember(answer.key)
        self._duplicates += r.duplicates
        self._changed.notify()

    def _remember(self, key: Key) -> None:
        if self._dedupe_window <= 0 or key == (None, None):
            return
        self._counted[key] = None
        self._counted.move_to_end(key)
        while len(self._counted) > self._dedupe_window:
            self._counted.popitem(last=False)

    def committed(self, tp: Any) -> int | None:
        """The last offset committed for ``tp`` here, or read from the group (None: unknown)."""
        p = self._parts.get(tp)
        return None if p is None else p.committed

    def set_committed(self, tp: Any, offset: int) -> None:
        """The group's committed offset of ``tp``, read before this process committed any."""
        p = self._parts.get(tp)
        if p is not None and p.committed is None:
            p.committed = offset

    # -- counts --------------------------------------------------------------------------------

    def unfinished(self, tps: Iterable[Any] | None = None) -> int:
        """Entries not yet finished (in the given partitions, or all)."""
        keys = self._parts if tps is None else [t for t in tps if t in self._parts]
        return sum(1 for tp in keys for e in self._parts[tp].queue if not e.done)

    def uncommitted(self, tp: Any) -> int:
        """Entries of ``tp`` fetched and not yet committed, finished or not."""
        p = self._parts.get(tp)
        return 0 if p is None else len(p.queue)

    @property
    def partitions(self) -> list[Any]:
        """The partitions whose records are kept (assigned, not being revoked or lost)."""
        return [tp for tp, p in self._parts.items() if not p.revoking]

    def __len__(self) -> int:
        """Entries fetched and not yet committed, finished or not."""
        return sum(len(p.queue) for p in self._parts.values())


def _order(tp: Any) -> tuple[str, int]:
    return (tp.topic, tp.partition)
