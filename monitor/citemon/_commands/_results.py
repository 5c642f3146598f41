"""Reading the results topic back (``citemon inspect``): ``read_committed``, from a position.

The monitor writes each scored answer to the results topic inside the Kafka transaction that
commits its input offsets (:mod:`citemon._service.outputs`), so only a ``read_committed`` reader
sees each answer exactly once: an aborted transaction's records (a monitor killed mid-commit) are
skipped, and the end of a partition is its *last stable offset*, not the high watermark.

:class:`ResultsReader` assigns every partition of the topic (no consumer group: reading never
moves the monitor's offsets or anyone else's), seeks each partition to a :class:`Start` and
yields record batches until the ends it saw when it started, or, following, until ``stop``.
It connects with :meth:`Settings.kafka_options`, exactly as ``citemon run`` does, through the
same :class:`~citemon._service.kafka.KafkaClients` (a test hands in its own).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final, Literal

from citemon._core.errors import ConfigError, KafkaUnavailable
from citemon._service.kafka import KafkaClients, cluster_metadata
from citemon._service.settings import Settings

__all__ = ["DEFAULT_RESULTS_TOPIC", "ResultsReader", "Start"]

log = logging.getLogger(__name__)

DEFAULT_RESULTS_TOPIC: Final = "citemon.scores"
"""The results topic read when neither --results-topic nor CITEMON_RESULTS_TOPIC is set."""

POLL_TIMEOUT_MS: Final = 250
"""How long one fetch waits for records; bounds how late ``stop`` is noticed (plus a fetch)."""


@dataclass(frozen=True, slots=True)
class Start:
    """Where reading starts, per partition.

    ``time``: the first record at or after ``value`` (ms since the epoch; Kafka's
    ``offsets_for_times``); ``offset``: offset ``value`` (clamped to what the log holds);
    ``last``: the last ``value`` committed records before the end (counted, not subtracted:
    transaction markers take offsets too); ``end``: only new records.
    """

    kind: Literal["time", "offset", "last", "end"]
    value: int = 0


class ResultsReader:
    """Batches of the results topic's committed records; ``async with`` opens and closes it."""

    def __init__(
        self,
        settings: Settings,
        topic: str,
        *,
        partitions: frozenset[int] = frozenset(),
        client_id: str | None = None,
        what: str = "results topic",
        set_by: str = "--results-topic / CITEMON_RESULTS_TOPIC",
        clients: KafkaClients | None = None,
    ) -> None:
        self._settings = settings
        self._clients = clients or KafkaClients()
        self.topic = topic
        self._what, self._set_by = what, set_by  # for the error when the topic is missing
        self._only = partitions
        self._client_id = client_id or f"{settings.client_id}-inspect"
        self._consumer: Any = None
        self.partitions: list[Any] = []
        self.ends: dict[Any, int] = {}

    async def __aenter__(self) -> ResultsReader:
        from aiokafka import TopicPartition
        from aiokafka.errors import KafkaConnectionError

        s = self._settings
        consumer = self._clients.reader(s, client_id=self._client_id)
        try:
            await consumer.start()
            cluster = await cluster_metadata(consumer)
        except KafkaConnectionError as exc:
            await consumer.stop()
            raise KafkaUnavailable.connecting(s.bootstrap_servers, exc) from exc
        except BaseException:
            await consumer.stop()
            raise
        self._consumer = consumer
        try:
            if self.topic not in cluster.topics():
                raise ConfigError(
                    f"{self._what} {self.topic!r} does not exist at {s.bootstrap_servers} "
                    f"({self._set_by})"
                )
            numbers = sorted(cluster.partitions_for_topic(self.topic) or ())
            missing = sorted(self._only - set(numbers))
            if missing:
                raise ConfigError(
                    f"--partition {missing[0]}: topic {self.topic!r} has partitions {numbers}"
                )
            self.partitions = [
                TopicPartition(self.topic, p) for p in numbers if not self._only or p in self._only
            ]
            consumer.assign(self.partitions)
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await consumer.stop()

    async def seek(
        self, start: Start, *, until_ms: int | None = None
    ) -> dict[Any, tuple[int, int]]:
        """Position every partition at ``start``; returns partition → (from, to) offsets, where
        ``to`` is the end a bounded read stops at (the last stable offset now, or the first
        offset at or after ``until_ms``)."""
        c = self._consumer
        tps = self.partitions
        begins = await c.beginning_offsets(tps)
        ends = await c.end_offsets(tps)  # read_committed: the last stable offsets
        if start.kind == "time":
            found = await c.offsets_for_times({tp: start.value for tp in tps})
            positions = {tp: found[tp].offset if found[tp] is not None else ends[tp] for tp in tps}
        elif start.kind == "offset":
            positions = {tp: min(max(start.value, begins[tp]), ends[tp]) for tp in tps}
        elif start.kind == "last":
            positions = {tp: await self._back(tp, begins[tp], ends[tp], start.value) for tp in tps}
        else:
            positions = dict(ends)
        stops = dict(ends)
        if until_ms is not None:
            found = await c.offsets_for_times({tp: until_ms for tp in tps})
            for tp in tps:
                if found[tp] is not None:
                    stops[tp] = min(stops[tp], found[tp].offset)
        for tp in tps:
            c.seek(tp, positions[tp])
        self.ends = stops
        return {tp: (positions[tp], stops[tp]) for tp in tps}

    async def _back(self, tp: Any, begin: int, end: int, n: int) -> int:
        """The offset of the n-th committed record before ``end`` (or ``begin``). Transaction
        markers and aborted records take offsets too, so look back 2n offsets, then 8n, …"""
        c = self._consumer
        others = [p for p in self.partitions if p != tp]
        c.pause(*others)
        try:
            window = 2 * n
            while True:
                low = max(begin, end - window)
                c.seek(tp, low)
                offsets: list[int] = []
                while await c.position(tp) < end:
                    got = await c.getmany(tp, timeout_ms=POLL_TIMEOUT_MS)
                    offsets.extend(r.offset for r in got.get(tp, ()) if r.offset < end)
                if len(offsets) >= n or low == begin:
                    return offsets[-n] if len(offsets) >= n else low
                window *= 4
        finally:
            c.resume(*others)

    async def batches(
        self, stop: asyncio.Event, *, follow: bool = False, max_records: int = 500
    ) -> AsyncIterator[list[Any]]:
        """Record batches from the positions :meth:`seek` set; without ``follow`` until every
        partition reaches the end :meth:`seek` saw, with it until ``stop`` is set."""
        c = self._consumer
        pending = {tp for tp in self.partitions if follow or await c.position(tp) < self.ends[tp]}
        while pending and not stop.is_set():
            got = await c.getmany(*pending, timeout_ms=POLL_TIMEOUT_MS, max_records=max_records)
            out: list[Any] = []
            for tp, records in got.items():
                if follow:
                    out.extend(records)
                else:
                    out.extend(r for r in records if r.offset < self.ends[tp])
            if out:
                yield out
            if not follow:
                for tp in list(pending):
                    if await c.position(tp) >= self.ends[tp]:
                        pending.discard(tp)
                        c.pause(tp)  # fetch no further than the end: --follow resumes there
        if not follow:
            for tp in self.partitions:  # records fetched past an end were not yielded
                c.seek(tp, self.ends[tp])
                c.resume(tp)
