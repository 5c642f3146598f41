"""Intake: fetch within the work bounds, take each record into the ledger, decode it into answers.

A fetch asks for no more records than there are free slots: at most ``max_inflight_answers``
answers are scored and at most ``max_uncommitted_records`` records are fetched but not
committed. With no free slot every assigned partition is paused (the client stops prefetching
too) and resumed once work falls below :data:`RESUME_FRACTION` of both caps, while ``getmany``
keeps being called so the consumer stays in its group: memory stays flat.

A record decodes to self-contained answer spans (admitted at once), trace parts (handed to the
:class:`~citemon._otlp.assembly.TraceAssembler`), spans that are no answers (skipped, counted) and
spans or payloads that do not decode (dead-lettered with the record's commit, counted). Every
span read is counted once in ``citemon_spans_total``: ``answer`` / ``sampled_out`` (a
self-contained answer span, or ``skipped`` when it was counted already), ``part`` (a span a
dialect read as part of a multi-span trace, whatever becomes of the trace:
``citemon_traces_total`` says), ``skipped`` (nothing read from it), ``invalid``.

A record with a part of a trace still waiting for the rest writes the trace's parts to the
held-parts store with its own commit (:mod:`citemon._service.held`) and finishes at once, so the
bound on uncommitted records never holds back the record that completes the trace. The answer
assembled later is scored with the record that completed it (or, settled by its window, with an
anchor entry at its partition's position), and the store's tombstone goes out in that commit.
Parts too large for the store hold their record instead, as before: it finishes only when its
trace leaves the assembler.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final

from aiokafka.errors import KafkaError

from citemon._core.errors import DecodeError
from citemon._core.records import AnswerRecord
from citemon._metrics import Metrics
from citemon._otlp.assembly import TraceAssembler
from citemon._otlp.decoding import decode_otlp
from citemon._otlp.spans import DecodedBatch, TraceSpan
from citemon._service.answers import AnswerJobs
from citemon._service.held import HeldParts, HeldTrace
from citemon._service.kafka import UNDECODABLE, BadBatch, KafkaClients, Rereader, Scan
from citemon._service.ledger import Entry, Ledger
from citemon._service.lifecycle import Signal
from citemon._service.outputs import bad_batch_letter, dead_letter
from citemon._service.settings import Settings

__all__ = [
    "DECODE_SLICE_S",
    "RESUME_FRACTION",
    "UNLOCATED_BACKOFF_S",
    "BatchRecovery",
    "Intake",
    "KeyCheck",
]

log = logging.getLogger(__name__)

RESUME_FRACTION: Final = 0.75
"""Resume partitions when work falls below this share of a cap."""
_POLL_MS: Final = 200
DECODE_SLICE_S = 0.02
"""How long taking one fetch runs before it yields to the event loop (:meth:`Intake.take_all`):
a full fetch of small spans is ~0.2 s of decoding, which would stall heartbeats and /healthz."""
UNLOCATED_BACKOFF_S: Final = 1.0
"""How long intake waits before fetching again when a fetch did not decode and re-reading found
no bad batch (or failed): the same fetch would fail again at once."""


class Intake:
    """The consumer's side of the monitor: fetch, take, decode, admit; tick the assembler; get
    past a batch the consumer cannot decode (:meth:`recover`, re-reading with ``clients``)."""

    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        answers: AnswerJobs,
        metrics: Metrics,
        *,
        assembler: TraceAssembler,
        held: HeldParts,
        clients: KafkaClients,
        clock: Callable[[], float],
    ) -> None:
        self._settings = settings
        self._ledger = ledger
        self._skipped = 0
        self._answers = answers
        self._metrics = metrics
        self._assembler = assembler
        self._clock = clock
        self._keys = KeyCheck(metrics, topic=settings.rekey_topic or settings.topic)
        self._store = held
        # Per trace ID: when its first part was held, and the records holding its parts (parts
        # too large for the held-parts store only).
        self._held: OrderedDict[str, tuple[float, list[Entry]]] = OrderedDict()
        self._paused = False
        self._held_changed = Signal()
        self._recovery = BatchRecovery(
            settings, ledger, clients.rereader(settings, client_id=f"{settings.client_id}-reread")
        )

    @property
    def paused(self) -> bool:
        """Whether the partitions are paused because work is full."""
        return self._paused

    @property
    def skipped(self) -> int:
        """Spans read and of no use (no dialect reads anything from them, bare roots)."""
        return self._skipped

    @property
    def undecodable_batches(self) -> int:
        """Batches the consumer could not decode, located and skipped (each dead-lettered)."""
        return self._recovery.undecodable_batches

    @property
    def rewound_partitions(self) -> int:
        """Partitions sought back to where intake stood after a fetch that did not decode."""
        return self._recovery.rewound_partitions

    def held_changed(self) -> Coroutine[Any, Any, bool]:
        """Await this to return when the traces held for assembly change by a :meth:`tick` or
        a :meth:`drop` after the call (the assembler's other changes come with a fetch taken,
        which the ledger tells of)."""
        return self._held_changed.wait()

    # -- the loop ------------------------------------------------------------------------------

    async def run(self, consumer: Any, go_on: Callable[[], bool]) -> None:
        """Fetch and take while ``go_on()``; get past a fetch that does not decode
        (:meth:`recover`), waiting :data:`UNLOCATED_BACKOFF_S` when nothing was located."""
        max_poll = self._settings.max_poll_records
        while go_on():
            free = self._adjust(consumer)
            try:
                batches = await consumer.getmany(
                    timeout_ms=_POLL_MS, max_records=max(1, min(max_poll, free))
                )
            except UNDECODABLE as exc:
                self._ledger.fetched()
                # Positions may stand past records the failed fetch dropped until the re-read
                # puts them back: taking a fetch, as far as catching up can tell.
                with self._ledger.taking_fetch():
                    if not await self.recover(consumer, exc):
                        await asyncio.sleep(UNLOCATED_BACKOFF_S)
                continue
            self._ledger.fetched()
            await self.take_all(batches)

    async def recover(self, consumer: Any, exc: BaseException) -> bool:
        """After a ``getmany`` that raised ``exc`` on a batch it cannot decode: re-read every
        readable partition from where intake stands, take the records before a bad batch,
        skip the batch (dead-lettered) and seek past it. Returns whether a bad batch was
        located; False when none was (or the re-read failed), and the caller waits before
        fetching again."""
        log.warning("a fetched batch does not decode (%s): locating it", exc)
        located = False
        try:
            for tp in self._ledger.all_readable():
                scan = await self._recovery.locate(consumer, tp)
                if scan is None or scan.bad is None:
                    continue
                for rec in scan.good:  # no await from the re-read to the skip
                    self.take(tp, rec)
                self._recovery.skip(consumer, tp, scan.bad)
                located = True
        except (KafkaError, OSError, TimeoutError) as err:
            log.warning("re-reading after an undecodable batch failed, will retry: %r", err)
            return False
        if not located:
            log.warning("no undecodable batch found on re-reading; fetching again")
        return located

    async def aclose(self) -> None:
        """Close what intake opened: the re-read client, if one was made."""
        await self._recovery.close()

    def pause_new(self, consumer: Any, tps: list[Any]) -> None:
        """Partitions assigned while work is full pause at once."""
        if self._paused and tps:
            consumer.pause(*tps)

    def _adjust(self, consumer: Any) -> int:
        """Pause or resume for the work in flight; returns the free slots (at most that many
        records may be fetched)."""
        s = self._settings
        answers, uncommitted = len(self._answers), len(self._ledger)
        free = min(s.max_inflight_answers - answers, s.max_uncommitted_records - uncommitted)
        below_low_water = (
            answers < s.max_inflight_answers * RESUME_FRACTION
            and uncommitted < s.max_uncommitted_records * RESUME_FRACTION
        )
        if free <= 0:
            self._set_paused(consumer, True, answers)
        elif self._paused and below_low_water:
            self._set_paused(consumer, False, answers)
        elif self._paused:
            self._set_paused(consumer, True, answers)
        return free

    def _set_paused(self, consumer: Any, paused: bool, answers: int) -> None:
        assigned = set(self._ledger.assigned)
        if paused == self._paused:
            if paused:  # partitions assigned since we paused must pause too
                fresh = assigned - set(consumer.paused())
                if fresh:
                    consumer.pause(*fresh)
            return
        self._paused = paused
        if paused:
            consumer.pause(*assigned)
            log.info("work is full (%d answers in flight): partitions paused", answers)
        else:
            consumer.resume(*consumer.paused())
            log.info("partitions resumed")

    async def take_all(self, batches: Mapping[Any, list[Any]]) -> None:
        """Take one fetch (``getmany``'s result), yielding to the loop every
        :data:`DECODE_SLICE_S`: a full fetch (``fetch_max_bytes``, 8 MB of small spans) is up to
        ~0.2 s of decoding, which would stall heartbeats and ``/healthz``. A rebalance during a
        yield drops the rest of the fetch: it revokes every partition (eager protocol) and the
        new assignment fetches from the committed offsets, so nothing is lost and nothing is
        taken twice.

        A partition sought during a yield (opening it) has the rest of its records dropped: the
        next fetch delivers them again from where it was sought. Only that partition's (the
        others' positions are past their records), and only seeks after the fetch returned:
        aiokafka itself drops records fetched before a seek when ``getmany`` drains them, and
        those it returns after one are from the new position (dropping them too would lose
        them)."""
        loop = asyncio.get_running_loop()
        slice_s = DECODE_SLICE_S  # read now: a test sets it to 0 (a yield before every record)
        rebalances = self._ledger.rebalances
        seeks = {tp: self._ledger.seeks(tp) for tp in batches}  # no await since getmany
        until = loop.time() + slice_s
        with self._ledger.taking_fetch():
            for tp, records in batches.items():
                for record in records:
                    if loop.time() >= until:
                        await asyncio.sleep(0)
                        if self._ledger.rebalances != rebalances:
                            return
                        until = loop.time() + slice_s
                    if self._ledger.seeks(tp) != seeks[tp]:
                        break
                    self.take(tp, record)

    # -- one record ----------------------------------------------------------------------------

    def take(self, tp: Any, rec: Any) -> None:
        """Take one fetched record of ``tp`` (a ``ConsumerRecord``: ``offset``, ``key``,
        ``value``, ``timestamp``). Records the ledger does not take (a partition not readable
        now, an offset below its floor) are ignored."""
        entry = self._ledger.take(tp, rec.offset, rec.timestamp)
        if entry is None:
            return
        try:
            self._decode(entry, rec)
        finally:
            self._ledger.release(entry)

    def _decode(self, entry: Entry, rec: Any) -> None:
        dlq = self._settings.dlq_topic
        source = (entry.tp.topic, entry.tp.partition, entry.offset)
        try:
            batch = decode_otlp(rec.value or b"", tools=self._settings.agents.reading)
        except DecodeError as exc:
            if exc.reason == "no_answer_spans":  # every span of it read, none of use
                self._metrics.span("skipped", exc.spans)
                self._skipped += exc.spans
            else:
                self._metrics.span("invalid")
                message = dead_letter(dlq, source, rec.key, rec.value or b"", exc.reason, str(exc))
                self._ledger.dead_letter(entry, message, exc.reason)
            return
        self._keys.check(rec.key, batch)  # spans not keyed by their trace ID, counted
        if batch.errors:
            self._metrics.span("invalid", len(batch.errors))
            first = batch.errors[0]
            message = dead_letter(
                dlq,
                source,
                rec.key,
                rec.value,
                first.reason,
                f"{len(batch.errors)} of {batch.span_count} spans failed; first: {first}",
                partial=True,
            )
            self._ledger.dead_letter(entry, message, first.reason)
        if batch.skipped:
            self._metrics.span("skipped", batch.skipped)
            self._skipped += batch.skipped
        for record in batch.records:
            self._answers.admit(record, [entry], entry.timestamp_ms)
        if batch.spans:
            self._take_parts(entry, batch.spans)

    # -- traces in parts -----------------------------------------------------------------------

    def _take_parts(self, entry: Entry, spans: list[TraceSpan]) -> None:
        """Hand ``entry``'s trace parts to the assembler; score what it completes or settles;
        write the parts of traces still waiting to the held-parts store with ``entry``."""
        mine: dict[str, list[TraceSpan]] = {}
        read = 0
        for span in spans:
            if span.answered:
                continue  # the marker of a self-contained answer, counted as that answer
            mine.setdefault(span.trace_id, []).append(span)
            read += span.documents is not None or span.answer is not None
        bare = sum(len(parts) for parts in mine.values()) - read
        if read:
            self._metrics.span("part", read)
        if bare:
            self._metrics.span("skipped", bare)
            self._skipped += bare
        carriers = _Carriers(self._ledger, entry)
        try:
            for record in self._assembler.add(spans):
                self._admit_assembled(record, carriers, here=record.trace_id in mine)
            for tid, parts in mine.items():
                held = self._assembler.parts(tid)
                if held is None:
                    continue  # completed, settled, or nothing held (a bare root alone)
                _, root_seen, age_s = held
                message = self._store.upsert(
                    tid, entry.tp, entry.offset, parts, root_seen=root_seen, age_s=age_s
                )
                if message is not None:
                    entry.held.append(message)
                else:
                    self._hold(tid, entry)
            self._let_go(carriers)
        finally:
            carriers.release()

    def _hold(self, tid: str, entry: Entry) -> None:
        """``entry`` carries a part of ``tid`` too large for the store: it waits for the trace."""
        _, held = self._held.setdefault(tid, (self._clock(), []))
        held.append(entry)
        self._ledger.hold(entry)

    def _admit_assembled(self, record: AnswerRecord, carriers: _Carriers, *, here: bool) -> None:
        """Score an assembled trace with the entries its parts' store changes commit with: the
        record that brought its last part (``here``), or an anchor of each partition whose
        store holds parts of it, and the records held for parts too large for the store.

        A trace with nothing behind it (its partition was revoked or lost) is not scored:
        nothing could commit it, and counting it here would count it a second time where its
        partition's new owner reads it again. Revoking discards such traces from the assembler
        (:meth:`drop`), so this is a guard, not a path."""
        tid = record.trace_id or ""
        entries: list[Entry] = [carriers.entry] if here and carriers.entry is not None else []
        for tp in self._store.partitions(tid):
            carrier = carriers.get(tp)
            if carrier is not None and carrier not in entries:
                entries.append(carrier)
        _, held = self._held.pop(tid, (0.0, []))
        entries += [e for e in held if e not in entries]
        if not entries:
            log.warning("trace %s assembled with no Kafka record behind it: not scored", tid)
            return
        try:
            self._answers.admit(record, entries, entries[-1].timestamp_ms, assembled=True)
        finally:
            self._ledger.release_all(held)

    def _let_go(self, carriers: _Carriers) -> None:
        """Traces that left the assembler: a tombstone for each store partition holding parts
        of them, with that partition's carrier; records held for them released."""
        for tid in self._assembler.take_gone():
            for tp, message in self._store.gone(tid):
                carrier = carriers.get(tp)
                if carrier is not None:
                    carrier.held.append(message)
            _, held = self._held.pop(tid, (0.0, []))
            self._ledger.release_all(held)

    def tick(self) -> None:
        """Score traces the assembler settled by time, and let go of what it let go (the commit
        loop does this every ``commit_interval_s``)."""
        self._assembler.expire()
        carriers = _Carriers(self._ledger, None)
        try:
            for record in self._assembler.take_ready():
                self._admit_assembled(record, carriers, here=False)
            self._let_go(carriers)
        finally:
            carriers.release()
        self._held_changed.notify()

    def restore(self, tp: Any, traces: Mapping[str, HeldTrace], now: float) -> int:
        """Hold again the traces read back from ``tp``'s held partition (``now``: Unix time,
        their windows run on from when they were first seen); returns how many."""
        n = 0
        for tid, trace in traces.items():
            spans = [span for _, span in trace.parts]
            age_s = max(0.0, now - trace.seen_at)
            if self._assembler.restore(tid, spans, root_seen=trace.root_seen, age_s=age_s):
                self._store.restored(tid, tp, trace)
                n += 1
        self._assembler.restored_all()
        return n

    def drop(self, tps: set[Any]) -> None:
        """Discard the traces held with a part in ``tps`` (being revoked or lost): they are never
        scored here. Their parts stay in the held-parts store (or, too large for it, in their
        records, left uncommitted), so the partition's next owner holds them again. (Spans of
        one trace share a partition when the exporter keys them by trace ID, as
        ``deploy/otel-collector.yaml`` does; records of a discarded trace elsewhere are
        released.)"""
        doomed = set(self._store.drop(tps))
        doomed |= {tid for tid, (_, held) in self._held.items() if any(e.tp in tps for e in held)}
        self._assembler.discard(doomed)
        for tid in doomed:
            _, held = self._held.pop(tid, (0.0, []))
            self._ledger.release_all(e for e in held if e.tp not in tps)
        self._held_changed.notify()


class _Carriers:
    """The entries that store changes and settled answers commit with, per partition: the
    record being taken for its own partition, an anchor (:meth:`Ledger.anchor`) for others,
    made on first use and released by :meth:`release`."""

    def __init__(self, ledger: Ledger, entry: Entry | None) -> None:
        self._ledger = ledger
        self.entry = entry
        self._anchors: dict[Any, Entry | None] = {}

    def get(self, tp: Any) -> Entry | None:
        if self.entry is not None and tp == self.entry.tp:
            return self.entry
        if tp not in self._anchors:
            self._anchors[tp] = self._ledger.anchor(tp)
        return self._anchors[tp]

    def release(self) -> None:
        for anchor in self._anchors.values():
            if anchor is not None:
                self._ledger.release(anchor)
        self._anchors.clear()


# -- records not keyed by their trace ID -------------------------------------------------------
# Input records whose key is not their spans' trace ID, counted and warned about once.
#
# The trace assembler joins a multi-span trace only when all its spans reach one replica: Kafka
# puts records with one key on one partition, so each record must be keyed by its spans' trace
# ID (the Collector's kafka exporter with ``partition_traces_by_id: true``, the shim's exporter).
# A record keyed otherwise (no key, a service name, several traces in one record) still scores
# its self-contained answers, but the parts of a multi-span trace may land on partitions other
# replicas own, where they are never assembled. :class:`KeyCheck` counts every span that arrived
# so (``citemon_spans_total{outcome="unkeyed"}``, besides its own outcome) and logs once, with
# the fix, when such a record carries parts of a multi-span trace.


class KeyCheck:
    """Counts the spans of each decoded record whose key is not their trace ID."""

    def __init__(self, metrics: Metrics, *, topic: str) -> None:
        self._metrics = metrics
        self._topic = topic
        self.unkeyed = 0
        self.warned = False

    def check(self, key: bytes | None, batch: DecodedBatch) -> int:
        """Count ``batch``'s spans whose trace ID is not ``key``; returns how many."""
        text = bytes(key).decode("ascii", "replace").lower() if key else None
        n = sum(count for tid, count in batch.spans_per_trace.items() if tid != text)
        if not n:
            return 0
        self.unkeyed += n
        self._metrics.span("unkeyed", n)
        parts = [s for s in batch.spans if not s.answered and s.trace_id != text]
        if parts and not self.warned:
            self.warned = True
            log.warning(
                "spans of multi-span traces arrive on %s in records not keyed by their trace "
                "ID (key %r, trace %s): a trace whose spans land on partitions another replica "
                "owns is never assembled, and its answer never counted. Key the records by "
                "trace ID (the Collector's kafka exporter: partition_traces_by_id: true), or run "
                "with --rekey-topic TOPIC to re-key them here "
                '(citemon_spans_total{outcome="unkeyed"} counts such spans)',
                self._topic,
                text,
                parts[0].trace_id,
            )
        return n


# -- batch recovery ---------------------------------------------------------------------------
# Getting past a Kafka record batch the consumer cannot decode, losing nothing else.
#
# aiokafka decompresses a fetched batch while ``getmany`` hands its records out. A batch it cannot
# decode (a codec whose library is missing, an unknown codec, a bad CRC) raises out of
# ``getmany`` (``UnsupportedCodecError``, ``CorruptRecordException``) without saying which
# partition failed, leaves that partition's position where it was (every later ``getmany`` raises
# again) and drops the records other partitions had handed out in that call, though their
# positions moved. Left alone, that is a crash, or a partition stuck for ever.
#
# So every readable partition is put back where intake stands and re-read from there with a
# client of our own (:class:`~citemon._service.kafka.Rereader`, made by the injected
# ``KafkaClients``): a raw ``Fetch`` unpacked batch by batch by the consumer's own
# ``PartitionRecords`` (same CRC check, same ``read_committed`` filtering of aborted
# transactions). The records before the first bad batch are taken, the batch is dead-lettered
# whole (:func:`~citemon._service.outputs.bad_batch_letter`) and the partition sought past it.
# Partitions still opening are left out: their records are ignored until they are sought to the
# committed offset, where a bad batch is met (and skipped) again; a skip entry added now would
# precede the records read after that seek, and the ledger would refuse them.


class BatchRecovery:
    """Locates bad batches for :meth:`Intake.recover` (which takes the records before one) and
    skips them; counts both. ``reread`` re-reads a partition from an offset."""

    def __init__(self, settings: Settings, ledger: Ledger, reread: Rereader) -> None:
        self._settings = settings
        self._ledger = ledger
        self._reread = reread
        self._rewound_partitions = 0
        self._undecodable_batches = 0

    @property
    def undecodable_batches(self) -> int:
        """Bad batches located and skipped (each dead-lettered)."""
        return self._undecodable_batches

    @property
    def rewound_partitions(self) -> int:
        """Partitions sought back to where intake stood after an undecodable fetch."""
        return self._rewound_partitions

    async def locate(self, consumer: Any, tp: Any) -> Scan | None:
        """Rewind ``tp`` to where intake stands and re-read it from there: the records before
        the first bad batch and the batch, or None when it has none (or was revoked, and maybe
        reassigned, meanwhile). Raises what the re-read raises (``KafkaError``, ``OSError``,
        ``TimeoutError``).

        A rebalance during any of its awaits ends it with None: ``tp`` may have been revoked,
        assigned again and sought to its committed offset, below ``start``; seeking it to
        ``start``, or taking the re-read records and seeking past the batch, would then commit
        past records never taken. Left alone, the next fetch reads from the new seek and meets
        the batch again."""
        ledger = self._ledger
        rebalances = ledger.rebalances
        start = ledger.taken_to(tp)
        if start is None:  # nothing taken since assignment: intake stands at the commit
            committed = await consumer.committed(tp)
            if committed is None:  # auto_offset_reset="earliest"
                committed = (await consumer.beginning_offsets([tp]))[tp]
            start = committed
        position = await consumer.position(tp)
        if ledger.rebalances != rebalances or not ledger.readable(tp):
            return None
        if position != start:
            consumer.seek(tp, start)  # records the failed getmany drained and dropped
            ledger.sought(tp)
            self._rewound_partitions += 1
        scan = await self._reread.scan(tp, start)
        if scan.bad is None or ledger.rebalances != rebalances or not ledger.readable(tp):
            return None
        return scan

    def skip(self, consumer: Any, tp: Any, bad: BadBatch) -> None:
        """Dead-letter ``bad`` with an entry at its last offset and seek ``tp`` past it (once
        the records before it are taken)."""
        log.error("skipping undecodable batch %s: dead-lettered", bad)
        self._undecodable_batches += 1
        message = bad_batch_letter(bad, self._settings.dlq_topic)
        self._ledger.skip_batch(tp, bad.next_offset, message, bad.reason)
        consumer.seek(tp, bad.next_offset)
        self._ledger.sought(tp)

    async def close(self) -> None:
        """Close the re-read client, if one was made."""
        await self._reread.close()
