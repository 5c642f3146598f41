"""The Kafka side of ``citemon run``: ordered offset tracking and delivery of what is finished.

Answers finish out of order (a slow judge call, a retry), so an offset may only be committed
when *every earlier record of its partition* is finished. :class:`OffsetTracker` keeps one queue
of fetched records per partition in fetch order; the committable offset is one past the longest
finished prefix. Gaps in the offsets (compaction, transaction markers) need no special case: the
queue holds records, not integers.

What finishing a record produced (result JSON, a dead letter, scores to count) waits on the
record's :class:`Entry` and is *delivered with the commit* by :class:`KafkaDelivery`:

* with a results topic, in one Kafka transaction per input partition that also carries that
  partition's consumed offset (``send_offsets_to_transaction``), by a producer whose
  transactional ID belongs to the partition: the results and DLQ records of an answer are
  visible to a ``read_committed`` reader exactly once, however the monitor crashes, rebalances
  or freezes;
* without one, DLQ records are acknowledged (``acks=all``) first, then the offsets committed:
  at least once.

Metrics are recorded by the caller *after* the commit succeeds, so a crash cannot make a
restarted monitor count an answer twice (see :mod:`citemon.service.pipeline`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from citemon.service.entries import OutMessage, Ready
from citemon.service.kafka_internals import producer_is_fatal
from citemon.service.settings import Settings

__all__ = ["KafkaDelivery"]

log = logging.getLogger(__name__)

_OPEN_TIMEOUT_S = 30.0
"""A partition's producer not started by then (the broker is away) is retried later."""
_CLOSE_TIMEOUT_S = 5.0


class KafkaDelivery:
    """Produces the finished entries' messages and commits their offsets, atomically if it can.

    ``transactional`` (a results topic or a review sample is set): **one transactional
    producer per assigned input partition**, ``transactional.id`` = ``<prefix>-<topic>-<partition>``
    (:meth:`Settings.transactional_id_for`), opened when the partition is assigned
    (:meth:`open`) and closed when it is revoked (:meth:`close`). Each partition's results,
    dead letters and consumed offset go in one transaction of its own producer.

    Why per partition (the pre-KIP-447 scheme Kafka Streams used): aiokafka's
    ``send_offsets_to_transaction`` sends no group generation, so the broker cannot tell a
    replica that lost its partitions (frozen past its session timeout, then woken) from their
    owner. A transactional ID belongs to a *partition* instead of a process: the new owner's
    ``init_transactions`` (at assignment, before it reads the partition's committed offset)
    bumps the ID's epoch, which aborts the old owner's open transaction and makes every later
    request of the old owner fail with ``ProducerFenced``. No check-then-commit window is left:
    the broker decides, on the commit itself. A commit the old owner finished *before* the new
    owner's ``init_transactions`` is complete when that returns, so the offset the new owner
    then reads already includes it and nothing is scored twice.

    Otherwise an idempotent ``acks=all`` producer writes the dead letters before the offsets are
    committed through the consumer (at least once for dead letters). That commit carries the
    group generation and member ID, so the group coordinator rejects it from a member that was
    replaced: counts stay exact there too. Build with :meth:`start`; ``stop`` closes the
    producers.
    """

    def __init__(self, settings: Settings, consumer: Any) -> None:
        self._settings = settings
        self._consumer = consumer
        self.transactional = settings.transactional
        self._producer: Any = None
        self._producers: dict[Any, Any] = {}
        self.transactions = 0
        self.commits = 0

    async def start(self) -> None:
        """The dead-letter producer of the at-least-once mode (transactional: nothing yet)."""
        if self.transactional:
            return
        from aiokafka import AIOKafkaProducer

        self._producer = AIOKafkaProducer(
            **self._settings.kafka_options(),
            client_id=f"{self._settings.client_id}-dlq",
            enable_idempotence=True,
            acks="all",
        )
        await self._producer.start()

    def is_open(self, tp: Any) -> bool:
        """Whether ``tp`` can be delivered (always, without transactions)."""
        return not self.transactional or tp in self._producers

    def broken(self, tp: Any) -> bool:
        """Whether ``tp``'s producer is in aiokafka's fatal state (fenced, or its sender died,
        e.g. a connection closed mid-request while the broker stopped): it can never commit
        again, and only the group may hand out a fresh one (re-initialising it here could fence
        the partition's real owner)."""
        producer = self._producers.get(tp)
        return producer is not None and producer_is_fatal(producer)

    async def open(self, tp: Any) -> None:
        """Start ``tp``'s transactional producer: ``init_transactions`` fences any earlier
        owner of the partition and completes or aborts its last transaction."""
        if not self.transactional or tp in self._producers:
            return
        from aiokafka import AIOKafkaProducer

        s = self._settings
        producer = AIOKafkaProducer(
            **s.kafka_options(),
            client_id=f"{s.client_id}-results-{tp.partition}",
            transactional_id=s.transactional_id_for(tp.topic, tp.partition),
            transaction_timeout_ms=s.transaction_timeout_ms,
            enable_idempotence=True,
            acks="all",
        )
        try:
            async with asyncio.timeout(_OPEN_TIMEOUT_S):
                await producer.start()
        except BaseException:
            await _stop_quietly(producer)
            raise
        self._producers[tp] = producer

    async def close(self, tps: Iterable[Any]) -> None:
        """Close the producers of revoked partitions."""
        closing = [self._producers.pop(tp) for tp in list(tps) if tp in self._producers]
        await asyncio.gather(*(_stop_quietly(p) for p in closing))

    async def stop(self) -> None:
        await self.close(list(self._producers))
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await _stop_quietly(producer)

    async def deliver(
        self, batches: list[tuple[Ready[Any], list[OutMessage]]]
    ) -> dict[Any, BaseException | None]:
        """Produce each partition's messages and commit its offset; per partition, ``None``
        when it committed or the error (nothing of it is then committed, and with
        transactions nothing of it is visible)."""
        from aiokafka.structs import OffsetAndMetadata

        if not batches:
            return {}
        if self.transactional:
            outcomes = await asyncio.gather(
                *(self._transaction(r, messages) for r, messages in batches),
                return_exceptions=True,
            )
            return {
                r.tp: (out if isinstance(out, BaseException) else None)
                for (r, _), out in zip(batches, outcomes, strict=True)
            }
        messages = [m for _, ms in batches for m in ms]
        offsets = {r.tp: OffsetAndMetadata(r.offset, "") for r, _ in batches}
        try:
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
        except Exception as exc:  # reported per partition like the transactional path
            return {r.tp: exc for r, _ in batches}
        self.commits += 1
        return {r.tp: None for r, _ in batches}

    async def _transaction(self, r: Ready[Any], messages: list[OutMessage]) -> None:
        from aiokafka.errors import KafkaError
        from aiokafka.structs import OffsetAndMetadata

        producer = self._producers.get(r.tp)
        if producer is None:
            raise KafkaError(f"{r.tp}: no transactional producer (not opened yet)")
        futures: list[asyncio.Future[Any]] = []
        try:
            async with producer.transaction():
                for m in messages:
                    futures.append(
                        await producer.send(
                            m.topic, value=m.value, key=m.key, headers=list(m.headers)
                        )
                    )
                await producer.send_offsets_to_transaction(
                    {r.tp: OffsetAndMetadata(r.offset, "")}, self._settings.group
                )
        finally:
            for fut in futures:  # a fenced transaction fails them all: the error is raised above
                if fut.done() and not fut.cancelled():
                    fut.exception()
        self.transactions += 1
        self.commits += 1


async def _stop_quietly(producer: Any) -> None:
    """Close a producer within ``_CLOSE_TIMEOUT_S``; past it (the broker is away) abandon it: its
    open transaction is aborted by the partition's next ``init_transactions``."""
    try:
        async with asyncio.timeout(_CLOSE_TIMEOUT_S):
            await producer.stop()
    except Exception as exc:  # closing after a fatal error (fenced) may complain; nothing to do
        log.warning("stopping a producer: %s", type(exc).__name__)
