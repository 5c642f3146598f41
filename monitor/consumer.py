"""The Kafka side of ``citemon run``: ordered offset tracking and delivery of what is finished.

Answers finish out of order (a slow judge call, a retry), so an offset may only be committed
when *every earlier record of its partition* is finished. :class:`OffsetTracker` keeps one queue
of fetched records per partition in fetch order; the committable offset is one past the longest
finished prefix. Gaps in the offsets (compaction, transaction markers) need no special case: the
queue holds records, not integers.

What finishing a record produced (result JSON, a dead letter, scores to count) waits on the
record's :class:`Entry` and is *delivered with the commit* by :class:`KafkaDelivery`:

* with a results topic, in one Kafka transaction that also carries the consumed offsets
  (``send_offsets_to_transaction``): the results and DLQ records of an answer are visible to a
  ``read_committed`` reader exactly once, however the monitor crashes;
* without one, DLQ records are acknowledged (``acks=all``) first, then the offsets committed:
  at least once.

Metrics are recorded by the caller *after* the commit succeeds, so a crash cannot make a
restarted monitor count an answer twice (see :mod:`monitor.pipeline`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from monitor.records import AnswerScore
from monitor.settings import Settings

__all__ = ["Entry", "KafkaDelivery", "OffsetTracker", "OutMessage", "Ready"]

log = logging.getLogger(__name__)

TP = TypeVar("TP", bound=Hashable)


@dataclass(frozen=True, slots=True)
class OutMessage:
    """A record to produce together with the commit (a result or a dead letter)."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(slots=True, eq=False)
class Entry(Generic[TP]):
    """One consumed Kafka record and what finishing it produced.

    ``pending`` counts what still holds the record (its intake, each answer job, each trace
    part waiting for the rest of its trace); the record is finished at 0. ``alive`` turns false
    when its partition is revoked: late finishers then change nothing.
    """

    tp: TP
    offset: int
    timestamp_ms: int = -1
    pending: int = 1
    messages: list[OutMessage] = field(default_factory=list)
    scores: list[tuple[AnswerScore, str | None]] = field(default_factory=list)
    """Scored answers with their span ID; counted and published once the offset commits."""
    dead_letters: list[str] = field(default_factory=list)
    alive: bool = True

    @property
    def done(self) -> bool:
        return self.pending <= 0


@dataclass(slots=True)
class Ready(Generic[TP]):
    """A partition's committable offset and the finished entries below it, in offset order."""

    tp: TP
    offset: int
    entries: list[Entry[TP]]


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
        """Forget partitions; returns their unfinished entries (now dead)."""
        lost: list[Entry[TP]] = []
        for tp in tps:
            for entry in self._queues.pop(tp, ()):
                entry.alive = False
                if not entry.done:
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
            for entry in queue:
                if not entry.done:
                    break
                entries.append(entry)
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

    def __len__(self) -> int:
        """Entries fetched and not yet committed, finished or not."""
        return sum(len(q) for q in self._queues.values())


class KafkaDelivery:
    """Produces the finished entries' messages and commits their offsets, atomically if it can.

    ``transactional``: results and dead letters go in one transaction with the offsets.
    Otherwise an idempotent ``acks=all`` producer writes the dead letters before the offsets are
    committed through the consumer. Build with :meth:`start`; ``stop`` closes the producer.
    """

    def __init__(self, settings: Settings, consumer: Any) -> None:
        self._settings = settings
        self._consumer = consumer
        self.transactional = settings.results_topic is not None
        self._producer: Any = None
        self.transactions = 0
        self.commits = 0

    async def start(self) -> None:
        from aiokafka import AIOKafkaProducer

        options = self._settings.kafka_options()
        if self.transactional:
            self._producer = AIOKafkaProducer(
                **options,
                client_id=f"{self._settings.client_id}-results",
                transactional_id=self._settings.effective_transactional_id,
                transaction_timeout_ms=self._settings.transaction_timeout_ms,
                enable_idempotence=True,
                acks="all",
            )
        else:
            self._producer = AIOKafkaProducer(
                **options,
                client_id=f"{self._settings.client_id}-dlq",
                enable_idempotence=True,
                acks="all",
            )
        await self._producer.start()

    async def stop(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            try:
                await producer.stop()
            except Exception as exc:  # closing after a fatal error may complain; nothing to do
                log.warning("stopping the producer: %s", type(exc).__name__)

    async def deliver(self, ready: list[Ready[Any]], messages: list[OutMessage]) -> None:
        """Produce ``messages`` and commit the offsets of ``ready``; raises if either failed
        (nothing is then committed, and with transactions nothing is visible)."""
        from aiokafka.structs import OffsetAndMetadata

        offsets = {r.tp: OffsetAndMetadata(r.offset, "") for r in ready}
        if self.transactional:
            async with self._producer.transaction():
                for m in messages:
                    await self._producer.send(
                        m.topic, value=m.value, key=m.key, headers=list(m.headers)
                    )
                await self._producer.send_offsets_to_transaction(offsets, self._settings.group)
            self.transactions += 1
        else:
            if messages:
                futures = [
                    await self._producer.send(
                        m.topic, value=m.value, key=m.key, headers=list(m.headers)
                    )
                    for m in messages
                ]
                for fut in futures:
                    await fut
            await self._consumer.commit(offsets)
        self.commits += 1
