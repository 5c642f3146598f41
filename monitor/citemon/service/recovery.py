"""Getting past a record batch the consumer cannot decode, losing nothing else.

``getmany`` raised on a batch it cannot decode (:mod:`citemon.service.batches`). aiokafka does
not say which partition failed, and the failed call dropped the records it had already drained
from other partitions (their positions moved): so every readable partition is put back where
the intake stands and re-read from there with a client of our own. Where a bad batch is found,
the records before it are taken, the batch is dead-lettered whole (one tracker entry at its
last offset, so the commit moves past it once everything before it is finished) and the
partition is sought past it. Partitions still opening are left out: their records are ignored
until the pipeline seeks them to the committed offset, where a bad batch is met (and skipped)
again; a skip entry added now would precede the records read after that seek, and the tracker
would refuse them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.errors import KafkaError

from citemon.service.batches import BadBatch, Scan, scan_partition
from citemon.service.hooks import PipelineHooks
from citemon.service.kafka_internals import new_client
from citemon.service.messages import add_batch_dead_letter
from citemon.service.offsets import OffsetTracker
from citemon.service.partitions import PartitionStates
from citemon.service.settings import Settings
from citemon.service.stats import PipelineStats

__all__ = ["BatchRecovery", "Scanner"]

log = logging.getLogger(__name__)

Scanner = Callable[..., Awaitable[Scan]]
""":func:`~citemon.service.batches.scan_partition`'s signature: ``(client, tp, start, *,
max_bytes)``."""


class BatchRecovery:
    """Locates and skips undecodable batches; owns the re-read client (made on first use)."""

    def __init__(
        self,
        settings: Settings,
        partitions: PartitionStates,
        stats: PipelineStats,
        tracker: OffsetTracker[Any],
        *,
        take: Callable[[Any, Any], None],
        on_change: Callable[[], None],
        hooks: PipelineHooks,
        scan: Scanner = scan_partition,
        client: Any = None,
    ) -> None:
        self._settings = settings
        self._partitions = partitions
        self._stats = stats
        self._tracker = tracker
        self._take = take
        self._on_change = on_change
        self._hooks = hooks
        self._scan = scan
        self.client: Any = client

    async def recover(self, consumer: Any, exc: BaseException) -> None:
        """Find the bad batch behind ``exc``, take what precedes it, skip it; when none is
        found (or the re-read fails), wait ``unlocated_backoff_s`` and let intake fetch again."""
        s = self._settings
        log.warning("a fetched batch does not decode (%s): locating it", exc)
        found = 0
        try:
            if self.client is None:
                self.client = await new_client(s.kafka_options(), f"{s.client_id}-reread")
            for tp in self._partitions.all_readable():
                found += await self._reread(consumer, tp)
        except (KafkaError, OSError, TimeoutError) as err:
            log.warning("re-reading after an undecodable batch failed, will retry: %r", err)
            found = -1
        if found <= 0:
            if found == 0:
                log.warning("no undecodable batch found on re-reading; fetching again")
            await asyncio.sleep(self._hooks.unlocated_backoff_s)

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.close()

    async def _reread(self, consumer: Any, tp: Any) -> int:
        """Rewind ``tp`` to where intake stands and skip a bad batch there; 1 if one was."""
        parts = self._partitions
        start = parts.taken_to.get(tp)
        if start is None:  # nothing taken since assignment: intake stands at the commit
            committed = await consumer.committed(tp)
            if committed is None:  # auto_offset_reset="earliest"
                committed = (await consumer.beginning_offsets([tp]))[tp]
            start = committed
        if await consumer.position(tp) != start:
            consumer.seek(tp, start)  # records the failed getmany drained and dropped
            parts.sought(tp)
            self._stats.rewound_partitions += 1
        scan = await self._scan(
            self.client, tp, start, max_bytes=self._settings.max_partition_fetch_bytes
        )
        if scan.bad is None or not parts.readable(tp):
            return 0  # nothing to skip, or revoked (and maybe reassigned) meanwhile
        for rec in scan.good:
            self._take(tp, rec)
        self.skip(tp, scan.bad)
        consumer.seek(tp, scan.bad.next_offset)
        parts.sought(tp)
        return 1

    def skip(self, tp: Any, bad: BadBatch) -> None:
        """One tracker entry at the batch's last offset carries its dead letter, so the commit
        moves past the whole batch once everything before it is finished."""
        log.error(
            "skipping undecodable batch %s/%d offsets %d-%d (%s, %s): dead-lettered",
            bad.topic,
            bad.partition,
            bad.base_offset,
            bad.last_offset,
            bad.codec,
            bad.error,
        )
        self._stats.undecodable_batches += 1
        self._partitions.taken_to[tp] = bad.next_offset
        entry = self._tracker.add(tp, bad.last_offset, bad.timestamp_ms)
        add_batch_dead_letter(entry, self._settings.dlq_topic, bad)
        self._tracker.release(entry)
        self._on_change()
