"""Taking over a partition with a results topic: fence its previous owner, then seek.

The order closes the race with a frozen previous owner: the partition's transactional
producer's ``init_transactions`` fences it and waits for its last transaction to complete or
abort, so the committed offset read *afterwards* includes everything it managed to commit
(aiokafka fetched a committed offset already, concurrently with the assignment callback, which
may predate that commit). The intake ignores the partition's records until then
(:meth:`PartitionStates.readable <citemon.service.partitions.PartitionStates.readable>`), and
records below the committed offset (``floor``) fetched before the seek.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka.errors import KafkaError

from citemon.service.delivery import KafkaDelivery
from citemon.service.offsets import OffsetTracker
from citemon.service.partitions import PartitionStates

__all__ = ["open_partitions"]

log = logging.getLogger(__name__)


async def open_partitions(
    delivery: KafkaDelivery, consumer: Any, parts: PartitionStates, tracker: OffsetTracker[Any]
) -> None:
    """Open the producers of the partitions still opening, then read their committed offsets
    and seek there; one that fails (the broker is away) stays opening, retried by the caller
    on its next commit tick. The caller holds the commit lock."""
    tps = sorted(parts.opening & parts.assigned, key=lambda tp: tp.partition)
    outcomes = await asyncio.gather(*(delivery.open(tp) for tp in tps), return_exceptions=True)
    for tp, out in zip(tps, outcomes, strict=True):
        if tp not in parts.opening:
            continue  # revoked meanwhile
        if isinstance(out, BaseException):
            log.warning(
                "opening the producer of partition %d failed, will retry: %s",
                tp.partition,
                type(out).__name__,
            )
            continue
        try:
            committed = await consumer.committed(tp)
            if committed is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, committed)
            parts.sought(tp)
        except (KafkaError, OSError, TimeoutError) as exc:
            log.warning(
                "reading the committed offset of partition %d failed, will retry: %s",
                tp.partition,
                type(exc).__name__,
            )
            continue
        if committed is not None:
            parts.floor[tp] = committed
            tracker.set_committed(tp, committed)
        parts.opening.discard(tp)
