"""``--rekey-topic TOPIC``: the input re-keyed by trace ID before it is scored.

The trace assembler needs every span of a trace on one partition (records keyed by trace ID:
the Collector's ``partition_traces_by_id: true``, the shim's exporter). When the upstream keys
are something else and cannot be changed (a Collector that feeds other consumers too), spans of
one trace land on partitions other replicas own and the trace is never assembled.
:class:`RekeyStage` is Kafka's repartition pattern (what Kafka Streams does for a key change):
it consumes the input as consumer group ``<group>.rekey``, splits each record into one request
per trace (:func:`~citemon._otlp.split.split_by_trace`) and produces each to TOPIC keyed by its
trace ID, **in one transaction with the input offsets** (consume-transform-produce,
``send_offsets_to_transaction``); scoring then consumes TOPIC. Every input record reaches TOPIC
exactly once for a ``read_committed`` reader, whatever crashes or rebalances, so counts stay
exact whatever the upstream keys.

Fencing is the pipeline's (:class:`~citemon._service.outputs.KafkaDelivery`): one
transactional producer per input partition, ``citemon-<group>.rekey-<topic>-<partition>``,
opened at assignment before the committed offset is read, so a replaced owner is fenced. A
record that is no trace request is forwarded as it is (scoring dead-letters it, as before).

A record batch the consumer cannot decode cannot be re-keyed either: each open partition is
re-read from its committed offset (:class:`~citemon._service.kafka.Rereader`, made by the
injected clients), the records before the bad batch are forwarded and the batch itself goes to
the dead-letter topic, raw, in the same transaction as the offset past it, counted as the
pipeline counts its own. The stage's lag on the input (``citemon_consumer_lag{topic=<input>}``)
is published beside the scoring lag on TOPIC, so a stage that falls behind shows (and pages) as
the pipeline would.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Final

from aiokafka import ConsumerRebalanceListener
from aiokafka.errors import KafkaError, ProducerFenced

from citemon._core.errors import DecodeError
from citemon._metrics import Metrics
from citemon._otlp.split import split_by_trace
from citemon._service.kafka import UNDECODABLE, BadBatch, KafkaClients, RecordLimits, request_rejoin
from citemon._service.outputs import (
    Commit,
    KafkaDelivery,
    OutMessage,
    bad_batch_letter,
    fit_dead_letter,
)
from citemon._service.settings import Settings

__all__ = ["RekeyStage", "rekey_messages"]

log = logging.getLogger(__name__)

_POLL_MS: Final = 200
_RETRY_S: Final = 0.5


def rekey_messages(record: Any, topic: str) -> list[OutMessage]:
    """The records that carry ``record``'s spans to ``topic``, one per trace, each keyed by
    its trace ID (the record itself when it is already so, or is no trace request)."""
    value = record.value or b""
    headers = tuple((k, bytes(v)) for k, v in (record.headers or ()))
    try:
        pieces = split_by_trace(value)
    except DecodeError:
        return [OutMessage(topic, record.key, value, headers)]
    key = bytes(record.key).decode("ascii", "replace") if record.key else None
    if len(pieces) <= 1 and (not pieces or next(iter(pieces)) in (key, "")):
        return [OutMessage(topic, record.key, value, headers)]
    return [
        OutMessage(topic, tid.encode() if tid else record.key, piece, headers)
        for tid, piece in pieces.items()
    ]


class RekeyStage(ConsumerRebalanceListener):  # type: ignore[misc]
    """Consumes ``settings.topic`` and re-produces it keyed by trace ID to
    ``settings.rekey_topic``; :meth:`run` until cancelled (supervised by the pipeline)."""

    def __init__(
        self,
        settings: Settings,
        clients: KafkaClients,
        *,
        metrics: Metrics,
        limits: RecordLimits,
    ) -> None:
        if settings.rekey_topic is None:
            raise ValueError("RekeyStage needs settings.rekey_topic")
        self.target: str = settings.rekey_topic
        self.group = f"{settings.group}.rekey"
        # The stage's own group: its transactional IDs and committed offsets are its own.
        self._settings = settings.model_copy(update={"group": self.group})
        self._clients = clients
        self._consumer: Any = None
        self._delivery: KafkaDelivery | None = None
        self._lock = asyncio.Lock()
        self._open: set[Any] = set()
        self._opening: set[Any] = set()
        self._epochs: dict[Any, int] = {}
        self._metrics = metrics
        self._limits = limits
        self._committed: dict[Any, int] = {}  # per open partition, the offset committed past
        self._reread = self._clients.rereader(
            self._settings, client_id=f"{settings.client_id}-rekey-reread"
        )
        self.records = 0
        self.produced = 0
        self.rebalances = 0
        self.undecodable_batches = 0

    async def run(self) -> None:
        s = self._settings
        consumer = self._clients.group_consumer(
            s, group_id=self.group, client_id=f"{s.client_id}-rekey"
        )
        delivery = KafkaDelivery(s, consumer, self._clients)
        delivery.transactional = True  # always: the re-keyed records go with the offsets
        self._consumer, self._delivery = consumer, delivery
        lag: asyncio.Task[None] | None = None
        try:
            consumer.subscribe([s.topic], listener=self)
            await consumer.start()
            # Beside the forwarding, as the pipeline's own.
            lag = asyncio.create_task(self._lag_loop(), name="citemon-rekey-lag")
            log.info("re-keying %s by trace ID to %s as group %s", s.topic, self.target, self.group)
            while True:
                if self._opening:
                    await self._open_pending()
                try:
                    batches = await consumer.getmany(timeout_ms=_POLL_MS)
                except UNDECODABLE as exc:
                    await self._recover(exc)
                    continue
                epochs = dict(self._epochs)
                for tp, records in batches.items():
                    if records:
                        await self._forward(tp, records, epochs.get(tp))
        finally:
            if lag is not None:
                lag.cancel()
                await asyncio.gather(lag, return_exceptions=True)
            await delivery.stop()
            await consumer.stop()
            await self._reread.close()
            log.info(
                "re-key stage stopped: %d records in, %d out, %d rebalances, "
                "%d undecodable batches",
                self.records,
                self.produced,
                self.rebalances,
                self.undecodable_batches,
            )

    async def _forward(self, tp: Any, records: list[Any], epoch: int | None) -> None:
        messages = [m for r in records for m in rekey_messages(r, self.target)]
        commit = Commit(tp, records[-1].offset + 1, messages)
        if await self._commit(commit, epoch, retry_from=records[0].offset):
            self.records += len(records)
            self.produced += len(messages)

    async def _commit(self, commit: Commit, epoch: int | None, *, retry_from: int) -> bool:
        """Produce ``commit``'s messages and commit its offset in one transaction. ``False`` when
        the partition was revoked or assigned afresh since the fetch (it is then read again from
        its commit), its producer was fenced, or the commit failed (sought back to
        ``retry_from`` and retried after a pause)."""
        delivery, tp = self._delivery, commit.tp
        assert delivery is not None
        async with self._lock:
            if tp not in self._open or self._epochs.get(tp) != epoch:
                return False
            outcome = (await delivery.deliver([commit])).get(tp)
            if outcome is None:
                self._committed[tp] = commit.offset
                return True
            if isinstance(outcome, ProducerFenced) or delivery.broken(tp):
                log.error(
                    "re-key partition %d: our producer was fenced (a new owner): rejoining",
                    tp.partition,
                )
                self._open.discard(tp)
                self._forget(tp)
                await delivery.close([tp])
                request_rejoin(self._consumer)
                return False
            log.warning(
                "re-key commit failed, will retry (partition %d): %s",
                tp.partition,
                type(outcome).__name__,
            )
            self._consumer.seek(tp, retry_from)
        await asyncio.sleep(_RETRY_S)
        return False

    async def _recover(self, exc: BaseException) -> None:
        """After a ``getmany`` that raised on a batch it cannot decode (it says not which
        partition, and drops what other partitions handed out): re-read every open partition
        from its committed offset; where a bad batch is found, forward the records before it
        and dead-letter it with the offset past it."""
        consumer = self._consumer
        log.warning("re-key: a fetched batch does not decode (%s): locating it", exc)
        found = False
        try:
            for tp, epoch in sorted(self._epochs.items(), key=lambda e: e[0].partition):
                if tp not in self._open:
                    continue
                start = self._committed[tp]
                consumer.seek(tp, start)  # what the failed getmany drained and dropped
                scan = await self._reread.scan(tp, start)
                if scan.bad is not None:
                    found = True
                    await self._skip(tp, start, scan.good, scan.bad, epoch)
        except (KafkaError, OSError, TimeoutError) as err:
            log.warning("re-key: re-reading after an undecodable batch failed, will retry: %r", err)
        if not found:
            log.warning("re-key: no undecodable batch found on re-reading; fetching again")
            await asyncio.sleep(_RETRY_S)

    async def _skip(self, tp: Any, start: int, good: list[Any], bad: BadBatch, epoch: int) -> None:
        log.error("re-key: skipping undecodable batch %s: dead-lettered", bad)
        # Cut to the dead-letter topic's limit, as the pipeline's: a letter the broker refuses
        # would abort every retry of this transaction, and the stage would stall on the batch.
        letter = fit_dead_letter(bad_batch_letter(bad, self._settings.dlq_topic), self._limits)
        messages = [m for r in good for m in rekey_messages(r, self.target)]
        commit = Commit(tp, bad.next_offset, [*messages, letter])
        if await self._commit(commit, epoch, retry_from=start):
            self.records += len(good)
            self.produced += len(messages)
            self.undecodable_batches += 1
            self._metrics.dead_letter(bad.reason)
            for record, why in letter.cut:
                self._metrics.record_cut(record, why)
            self._consumer.seek(tp, bad.next_offset)

    async def _lag_loop(self) -> None:
        """Every ``lag_interval_s``, publish each open partition's lag: log end − committed."""
        while True:
            try:
                await self._publish_lag()
            except (KafkaError, OSError, TimeoutError) as exc:
                log.info("re-key lag update failed: %s", type(exc).__name__)
            await asyncio.sleep(self._settings.lag_interval_s)

    async def _publish_lag(self) -> None:
        metrics, tps = self._metrics, sorted(self._open, key=lambda t: t.partition)
        if not tps:
            return
        ends = await self._consumer.end_offsets(tps)
        for tp in tps:
            if tp in self._open and tp in self._committed:
                metrics.consumer_lag(tp.topic, tp.partition, max(0, ends[tp] - self._committed[tp]))

    def _forget(self, tp: Any) -> None:
        """``tp`` is no longer ours: drop its committed offset and its lag series."""
        self._committed.pop(tp, None)
        self._metrics.forget_partition(tp.topic, tp.partition)

    async def on_partitions_revoked(self, revoked: Iterable[Any]) -> None:
        gone = set(revoked)
        self.rebalances += 1
        async with self._lock:
            self._open -= gone
            self._opening -= gone
            for tp in gone:
                self._forget(tp)
            if self._delivery is not None:
                await self._delivery.close(gone)

    async def on_partitions_assigned(self, assigned: Iterable[Any]) -> None:
        """Mark ``assigned`` to be opened by the loop (:meth:`_open_pending`): reading the
        committed offset here, inside the rebalance, would wait for the rebalance itself."""
        for tp in assigned:
            self._epochs[tp] = self._epochs.get(tp, 0) + 1
            self._opening.add(tp)

    async def _open_pending(self) -> None:
        """Open each newly assigned partition's producer (fencing its previous owner), then
        seek to the committed offset read after that (the pipeline's
        order); one that fails stays pending, retried on the next round."""
        delivery, consumer = self._delivery, self._consumer
        assert delivery is not None
        async with self._lock:
            for tp in sorted(self._opening, key=lambda t: t.partition):
                try:
                    await delivery.open(tp)
                    committed = await consumer.committed(tp)
                    if committed is None:
                        committed = (await consumer.beginning_offsets([tp]))[tp]
                    consumer.seek(tp, committed)
                except (KafkaError, OSError, TimeoutError) as exc:
                    log.warning(
                        "re-key partition %d: opening failed, will retry: %s",
                        tp.partition,
                        type(exc).__name__,
                    )
                    continue
                self._opening.discard(tp)
                self._open.add(tp)
                self._committed[tp] = committed
