"""What the monitor produces with a commit, and delivering it together with the offsets.

The messages: a dead letter keeps the original key and value and says why in headers
(:data:`ERROR_HEADER`, :data:`ERROR_MESSAGE_HEADER`, :data:`SOURCE_HEADER`); a result is the
:class:`~citemon._core.records.AnswerScore` as compact JSON keyed by trace ID, with the span ID
and, when asked, the recut passage excerpts; a review record goes to the review topic for the
answers the review sample picks. Each is an :class:`OutMessage`; it waits on its record's ledger
entry and goes out *with* its commit (a :class:`Commit`, delivered by :class:`KafkaDelivery`),
so it is published exactly when the answer is counted. This module knows nothing of the ledger:
what a commit carries is gathered by the pipeline, which owns the commit
(:func:`~citemon._service.pipeline.commit_messages`).

Delivery, two modes:

* with a results topic or a review sample, one Kafka transaction per input partition carrying
  its results, review records, dead letters and consumed offset
  (``send_offsets_to_transaction``), by a producer whose transactional ID belongs to the
  partition: a ``read_committed`` reader sees each answer's records exactly once, however the
  monitor crashes, rebalances or freezes;
* without either, dead letters and held-parts upserts are acknowledged (``acks=all``) first,
  then the offsets committed through the consumer, and only once that commit is confirmed the
  held-parts tombstones are written: at least once for dead letters, and no answer lost to a
  crash between the two steps (a tombstone acknowledged before its commit would leave the
  completing record to be read again with its trace's held parts already gone; written after,
  a crash in between leaves a stale part, read back and settled as a trace without an answer,
  :mod:`citemon._service.held`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

from citemon._core.records import AnswerScore
from citemon._engine.excerpts import recut
from citemon._review.sample import review_record, review_selected
from citemon._service.kafka import BadBatch, KafkaClients, RecordLimits, producer_is_fatal
from citemon._service.settings import Settings

__all__ = [
    "ERROR_HEADER",
    "ERROR_MESSAGE_HEADER",
    "MAX_RECORD_BYTES",
    "MAX_REVIEW_RECORD_BYTES",
    "SOURCE_HEADER",
    "Commit",
    "KafkaDelivery",
    "OutMessage",
    "bad_batch_letter",
    "dead_letter",
    "error_headers",
    "fit_dead_letter",
    "fit_result",
    "result_message",
    "review_message",
]

log = logging.getLogger(__name__)

ERROR_HEADER: Final = "citemon.error"
"""DLQ header holding the reason code (a ``DecodeError.reason``, or ``score_error``)."""
ERROR_MESSAGE_HEADER: Final = "citemon.error.message"
SOURCE_HEADER: Final = "citemon.source"
"""``topic/partition/offset`` of the dead-lettered record."""
_MAX_ERROR_MESSAGE_BYTES: Final = 512

MAX_RECORD_BYTES: Final = 900_000
"""Under Kafka's default 1 MB ``message.max.bytes`` (and the producer's ``max_request_size``):
a larger record would fail its partition's transaction on every retry, for ever."""
MAX_REVIEW_RECORD_BYTES: Final = MAX_RECORD_BYTES
"""A larger review record is not written (a warning says so)."""

_OPEN_TIMEOUT_S: Final = 30.0
"""A partition's producer not started by then (the broker is away) is retried later."""
_CLOSE_TIMEOUT_S: Final = 5.0


# -- messages --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutMessage:
    """A record to produce together with the commit (a result, a review record, a dead letter)."""

    topic: str
    key: bytes | None
    value: bytes | None
    """None: a tombstone (the held-parts store's, :mod:`citemon._service.held`)."""
    headers: tuple[tuple[str, bytes], ...] = ()
    cut: tuple[tuple[str, str], ...] = ()
    """What was cut to make the record fit its topic, as (record, reason) pairs (the ``fit_*``
    functions below); counted once its commit succeeded."""
    partition: int | None = None
    """The partition to write (the held-parts store's: the input partition's own); None: by
    key."""


@dataclass(frozen=True, slots=True)
class Commit:
    """One input partition's commit as :meth:`KafkaDelivery.deliver` makes it: the offset to
    commit and the records to produce with it."""

    tp: Any
    offset: int
    messages: list[OutMessage]


def error_headers(reason: str, message: str) -> list[tuple[str, bytes]]:
    """A dead letter's reason and (cut) error message."""
    return [
        (ERROR_HEADER, reason.encode()),
        (ERROR_MESSAGE_HEADER, message.encode()[:_MAX_ERROR_MESSAGE_BYTES]),
    ]


def dead_letter(
    dlq_topic: str,
    source: tuple[str, int, int],
    key: bytes | None,
    value: bytes,
    reason: str,
    message: str,
    *,
    partial: bool = False,
) -> OutMessage:
    """The dead letter of a record (or part of it) at ``source`` (topic, partition, offset)."""
    topic, partition, offset = source
    headers = error_headers(reason, message)
    headers.append((SOURCE_HEADER, f"{topic}/{partition}/{offset}".encode()))
    if partial:
        headers.append(("citemon.partial", b"true"))
    return OutMessage(dlq_topic, key, value, tuple(headers))


def bad_batch_letter(bad: BadBatch, dlq_topic: str) -> OutMessage:
    """The dead letter of a record batch the consumer cannot decode: its raw bytes (a Kafka v2
    record batch any client with the codec can read again), its reason and error, and where it
    came from."""
    value = bad.raw if len(bad.raw) <= MAX_RECORD_BYTES else b""
    headers = error_headers(bad.reason, bad.error)
    extra = [
        (SOURCE_HEADER, f"{bad.topic}/{bad.partition}/{bad.base_offset}".encode()),
        ("citemon.batch.offsets", f"{bad.base_offset}-{bad.last_offset}".encode()),
        ("citemon.batch.codec", bad.codec.encode()),
    ]
    if not value:
        extra.append(("citemon.batch.omitted_bytes", str(len(bad.raw)).encode()))
    return OutMessage(dlq_topic, None, value, (*headers, *extra))


def result_message(
    settings: Settings,
    score: AnswerScore,
    span_id: str | None,
    limits: RecordLimits | None = None,
) -> OutMessage | None:
    """The results-topic record of a scored answer (None without a results topic), cut to
    fit the topic's limit (:func:`~citemon._service.outputs.fit_result`)."""
    topic = settings.results_topic
    if topic is None:
        return None
    body = score.model_dump(mode="json")
    body["span_id"] = span_id
    if settings.results_excerpt_chars:
        body["excerpts"] = recut(score.evidence, settings.results_excerpt_chars)
    key = (score.trace_id or "").encode() or None
    value, cut = fit_result(body, (limits or RecordLimits()).value_budget(topic, key))
    return OutMessage(topic, key, value, cut=tuple(("results", reason) for reason in cut))


def review_message(
    score: AnswerScore,
    span_id: str | None,
    settings: Settings,
    limits: RecordLimits | None = None,
) -> OutMessage | None:
    """The review record of ``score`` for ``settings.review_topic``, or ``None`` when the
    review sample does not pick it (or it has no trace ID to pick it by), or when its record
    would not fit the topic's limit (not written, with a warning; the caller counts it:
    ``review_selected`` tells the two apart)."""
    if not review_selected(score.trace_id, settings.review_rate):
        return None
    record = review_record(
        score,
        span_id=span_id,
        scored_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        passage_chars=settings.review_passage_chars,
    )
    value = record.to_json().encode()
    key = record.trace_id.encode()
    limit = min(
        MAX_REVIEW_RECORD_BYTES,
        (limits or RecordLimits()).value_budget(settings.review_topic, key),
    )
    if len(value) > limit:
        log.warning(
            "review record of trace %s is %d bytes, over %d: not written to %s",
            record.trace_id,
            len(value),
            limit,
            settings.review_topic,
        )
        return None
    return OutMessage(settings.review_topic, key, value)


# -- delivery --------------------------------------------------------------------------------


class KafkaDelivery:
    """Produces each ready partition's messages and commits its offset, atomically if it can.

    ``transactional`` (a results topic or a review sample is set): **one transactional producer
    per assigned input partition**, ``transactional.id`` = ``<prefix>-<topic>-<partition>``
    (:meth:`Settings.transactional_id_for`), opened when the partition is assigned
    (:meth:`open`) and closed when it is revoked (:meth:`close`).

    Why per partition (the pre-KIP-447 scheme Kafka Streams used): aiokafka's
    ``send_offsets_to_transaction`` sends no group generation, so the broker cannot tell a
    replica that lost its partitions (frozen past its session timeout, then woken) from their
    owner. A transactional ID that belongs to a *partition* can: the new owner's
    ``init_transactions`` (at assignment, before it reads the committed offset) bumps the ID's
    epoch, which aborts the old owner's open transaction and makes every later request of the
    old owner fail with ``ProducerFenced``. The broker decides, on the commit itself. A commit
    the old owner finished *before* that is complete when it returns, so the offset the new
    owner then reads already includes it and nothing is scored twice.

    Otherwise the consumer commits the offsets, with the group generation and member ID: the
    coordinator rejects it from a member that was replaced, so counts stay exact there too.
    """

    def __init__(self, settings: Settings, consumer: Any, clients: KafkaClients) -> None:
        self._settings = settings
        self._consumer = consumer
        self._clients = clients
        self.transactional = settings.transactional
        self._producer: Any = None
        self._producers: dict[Any, Any] = {}
        # At least once: held-parts tombstones whose commit is confirmed, not yet acknowledged,
        # per (input partition, key); written after every commit until they are.
        self._tombstones: dict[tuple[Any, bytes | None], OutMessage] = {}
        self.transactions = 0
        self.commits = 0

    async def start(self) -> None:
        """The dead-letter producer of the at-least-once mode (transactional: nothing yet)."""
        if self.transactional:
            return
        self._producer = self._clients.producer(
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
        s = self._settings
        producer = self._clients.producer(
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
        """Close the producers of revoked partitions (at least once: forget their tombstones not
        yet written, as the next owner may hold those keys again; their parts read back there
        settle as traces without an answer)."""
        tps = list(tps)
        gone = set(tps)
        for due in [k for k in self._tombstones if k[0] in gone]:
            del self._tombstones[due]
        closing = [self._producers.pop(tp) for tp in tps if tp in self._producers]
        await asyncio.gather(*(_stop_quietly(p) for p in closing))

    async def stop(self) -> None:
        await self.close(list(self._producers))
        if self._producer is not None and self._tombstones:
            await self._write_tombstones()
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await _stop_quietly(producer)

    async def deliver(self, commits: list[Commit]) -> dict[Any, BaseException | None]:
        """Produce each partition's messages and commit its offset; per partition, ``None``
        when it committed or the error (nothing of it is then committed, and with
        transactions nothing of it is visible)."""
        from aiokafka.structs import OffsetAndMetadata

        if not commits:
            return {}
        if self.transactional:
            outcomes = await asyncio.gather(
                *(self._transaction(c) for c in commits), return_exceptions=True
            )
            return {
                c.tp: (out if isinstance(out, BaseException) else None)
                for c, out in zip(commits, outcomes, strict=True)
            }
        # Tombstones wait for the commit (the module says why); an upsert of a key replaces its
        # whole value, so a tombstone followed by an upsert of the same key is dropped.
        messages: list[OutMessage] = []
        tombstones: dict[tuple[Any, bytes | None], OutMessage] = {}
        upserted: set[tuple[Any, bytes | None]] = set()
        for c in commits:
            for m in c.messages:
                if m.value is None:
                    tombstones[(c.tp, m.key)] = m
                    continue
                if m.partition is not None:  # a held-parts upsert
                    tombstones.pop((c.tp, m.key), None)
                    upserted.add((c.tp, m.key))
                messages.append(m)
        offsets = {c.tp: OffsetAndMetadata(c.offset, "") for c in commits}
        try:
            await self._send(messages)
            for key in upserted:  # an older tombstone still due would delete these parts
                self._tombstones.pop(key, None)
            await self._consumer.commit(offsets)
        except Exception as exc:  # reported per partition like the transactional path
            return {c.tp: exc for c in commits}
        self.commits += 1
        self._tombstones.update(tombstones)
        if self._tombstones:
            await self._write_tombstones()
        return {c.tp: None for c in commits}

    async def _send(self, messages: list[OutMessage]) -> None:
        """Produce ``messages`` with the at-least-once producer and wait for every ack."""
        futures = [
            await self._producer.send(
                m.topic, value=m.value, key=m.key, headers=list(m.headers), partition=m.partition
            )
            for m in messages
        ]
        for fut in futures:
            await fut

    async def _write_tombstones(self) -> None:
        """Write the tombstones whose commit is confirmed; on failure they stay due (a crash
        before they are written leaves stale parts: settled without an answer, never lost)."""
        due = dict(self._tombstones)
        try:
            await self._send(list(due.values()))
        except Exception as exc:
            log.warning(
                "%d held-parts tombstone(s) not written, will retry: %s",
                len(due),
                type(exc).__name__,
            )
            return
        for key, message in due.items():
            if self._tombstones.get(key) is message:
                del self._tombstones[key]

    async def _transaction(self, commit: Commit) -> None:
        from aiokafka.errors import KafkaError
        from aiokafka.structs import OffsetAndMetadata

        producer = self._producers.get(commit.tp)
        if producer is None:
            raise KafkaError(f"{commit.tp}: no transactional producer (not opened yet)")
        futures: list[asyncio.Future[Any]] = []
        try:
            async with producer.transaction():
                for m in commit.messages:
                    futures.append(
                        await producer.send(
                            m.topic,
                            value=m.value,
                            key=m.key,
                            headers=list(m.headers),
                            partition=m.partition,
                        )
                    )
                await producer.send_offsets_to_transaction(
                    {commit.tp: OffsetAndMetadata(commit.offset, "")}, self._settings.group
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


# -- records that fit -------------------------------------------------------------------------
# Records that fit: every record ``citemon run`` produces stays under the limit the broker
# enforces on its topic, so no commit can fail on every retry.
#
# A Kafka transaction that holds one record over the topic's ``max.message.bytes`` (or the
# producer's ``max_request_size``) fails, and since the record is built again for every retry of
# the commit, the partition would stall for good behind it. :class:`RecordLimits` holds, per
# topic, the bytes a record may take (read from the broker at start-up:
# :mod:`citemon._service.kafka`); the functions here make each record fit, in a documented way:
#
# * a **results** record (:func:`fit_result`): first the passage ``excerpts`` are dropped; then
#   the claims beyond what fits are dropped, summarised by their count and their verdicts; at
#   last (a record that does not fit even then) only the answer's identity is kept. The record is
#   marked ``cut``: ``{"excerpts": n, "claims": n, "verdicts": {verdict: n}, "bytes": size
#   before, "max_bytes": limit}``. The answer is still counted in the metrics in full: only the
#   written record is shorter.
# * a **dead letter** (:func:`fit_dead_letter`): the original value is left out (header
#   ``citemon.cut.omitted_bytes`` says how long it was); key and reason headers stay.
# * a **review** record that does not fit is not written (the caller counts it): a review record
#   without its passages could not be labelled.
#
# Each cut is named in :attr:`OutMessage.cut` and counted once the record's commit succeeded
# (``citemon_records_cut_total{record, reason}``).

_JSON: Final = {"separators": (",", ":"), "ensure_ascii": False}


def _dumps(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, **_JSON).encode()  # type: ignore[arg-type]


def fit_result(body: dict[str, Any], max_bytes: int) -> tuple[bytes, tuple[str, ...]]:
    """The results record ``body`` as JSON of at most ``max_bytes``, cut as the module says;
    returns the bytes and what was cut (``excerpts``, ``claims``, ``identity_only``)."""
    value = _dumps(body)
    if len(value) <= max_bytes:
        return value, ()
    original = len(value)
    claims: list[dict[str, Any]] = list(body.get("claims") or [])
    excerpts = body.get("excerpts") or {}
    cut: dict[str, Any] = {
        "excerpts": len(excerpts),
        "claims": 0,
        "verdicts": {},
        "bytes": original,
        "max_bytes": max_bytes,
    }
    reasons = ["excerpts"] if excerpts else []
    trimmed = {**body, "excerpts": {}, "cut": cut} if "excerpts" in body else {**body, "cut": cut}

    def with_claims(n: int) -> bytes:
        dropped = claims[n:]
        cut["claims"] = len(dropped)
        cut["verdicts"] = dict(Counter(str(c.get("verdict")) for c in dropped))
        return _dumps({**trimmed, "claims": claims[:n]})

    value = with_claims(len(claims))
    if len(value) <= max_bytes:
        return value, tuple(reasons)
    # The most claims that fit: the record grows with n, so search for the largest n that fits.
    low, high = 0, len(claims)
    while low < high:
        mid = (low + high + 1) // 2
        if len(with_claims(mid)) <= max_bytes:
            low = mid
        else:
            high = mid - 1
    value = with_claims(low)
    if claims:
        reasons.append("claims")
    if len(value) <= max_bytes:
        return value, tuple(reasons)
    # Not even the identity and the counts with no claim fit with the other fields: keep only
    # the fields that say which answer this is.
    keep = ("id", "service", "version", "environment", "trace_id", "span_id", "judge_calls")
    stub = {k: body[k] for k in keep if k in body}
    value = _dumps({**stub, "claims": [], "cut": cut})
    return value, (*reasons, "identity_only")


def fit_dead_letter(message: OutMessage, limits: RecordLimits) -> OutMessage:
    """``message`` (a dead letter) with its value left out when it would not fit its topic."""
    size = len(message.value or b"")
    headers = (*message.headers, ("citemon.cut.omitted_bytes", str(size).encode()))
    if size <= limits.value_budget(message.topic, message.key, message.headers):
        return message
    return replace(
        message, value=b"", headers=headers, cut=(*message.cut, ("dead_letter", "value"))
    )
