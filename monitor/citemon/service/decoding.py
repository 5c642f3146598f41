"""One Kafka record's payload into answers: decode, dead-letter what does not, assemble traces.

A record decodes to self-contained answer spans (admitted at once), trace parts (handed to the
:class:`~citemon.otlp.assembly.TraceAssembler`, the record held until the trace is assembled or
let go: :mod:`~citemon.service.held_parts`), spans that are no answers (skipped, counted) and
spans or payloads that do not decode (dead-lettered with the record's commit, counted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from citemon.core.errors import DecodeError
from citemon.core.records import AnswerRecord
from citemon.metrics import Metrics
from citemon.otlp.assembly import TraceAssembler
from citemon.otlp.decoding import decode_otlp
from citemon.service.answers import AnswerJobs
from citemon.service.entries import Entry
from citemon.service.held_parts import HeldParts
from citemon.service.keys import KeyCheck
from citemon.service.messages import add_dead_letter
from citemon.service.offsets import OffsetTracker
from citemon.service.settings import Settings
from citemon.service.stats import PipelineStats

__all__ = ["RecordDecoder"]

log = logging.getLogger(__name__)


class RecordDecoder:
    """Decodes taken records into the answers to score; ticks the trace assembler."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        stats: PipelineStats,
        *,
        assembler: TraceAssembler,
        held: HeldParts,
        answers: AnswerJobs,
        tracker: OffsetTracker[Any],
        on_change: Callable[[], None],
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        self._stats = stats
        self._assembler = assembler
        self._held = held
        self._answers = answers
        self._tracker = tracker
        self._on_change = on_change
        self._keys = KeyCheck(metrics, topic=settings.rekey_topic or settings.topic)

    def decode_into(self, entry: Entry[Any], rec: Any) -> None:
        dlq = self._settings.dlq_topic
        try:
            batch = decode_otlp(rec.value or b"")
        except DecodeError as exc:
            if exc.reason == "no_answer_spans":
                self._metrics.span("skipped")
                self._stats.skipped += 1
            else:
                self._metrics.span("invalid")
                add_dead_letter(entry, dlq, rec.key, rec.value or b"", exc.reason, str(exc))
            return
        self._keys.check(rec.key, batch)
        if batch.errors:
            self._metrics.span("invalid", len(batch.errors))
            first = batch.errors[0]
            add_dead_letter(
                entry,
                dlq,
                rec.key,
                rec.value,
                first.reason,
                f"{len(batch.errors)} of {batch.span_count} spans failed; first: {first}",
                partial=True,
            )
        if batch.skipped:
            self._metrics.span("skipped", batch.skipped)
            self._stats.skipped += batch.skipped
        for record in batch.records:
            self._answers.admit(record, [entry], entry.timestamp_ms)
        if batch.spans:
            self._held.hold(
                (
                    span.trace_id
                    for span in batch.spans
                    if not span.answered and not (span.documents is None and span.answer is None)
                ),
                entry,
            )
            for record in self._assembler.add(batch.spans):
                self._admit_assembled(record, entry.timestamp_ms)

    def _admit_assembled(self, record: AnswerRecord, timestamp_ms: int) -> None:
        """Score an assembled trace with the Kafka records of its parts, which hold it.

        A trace with no record behind it (its partition was revoked or lost) is not scored:
        nothing could commit it, and counting it here would count it a second time where its
        partition's new owner reads it again. Revoking discards such traces from the
        assembler (:meth:`HeldParts.drop`), so this is a guard, not a path."""
        held = self._held.take(record.trace_id)
        if not held:
            log.warning(
                "trace %s assembled with no Kafka record behind it: not scored", record.trace_id
            )
            return
        try:
            self._answers.admit(record, held, timestamp_ms)
        finally:
            for e in held:
                self._tracker.release(e)

    def tick(self) -> None:
        """Score traces the assembler settled by time and release the records of traces it
        let go (the commit loop does this every ``commit_interval_s``)."""
        self._assembler.expire()
        for record in self._assembler.take_ready():
            self._admit_assembled(record, -1)
        self._held.release_let_go()
        self._on_change()
