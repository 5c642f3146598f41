"""The review topic's message for a scored answer the review sample picks.

Built where the result message is (:meth:`Pipeline._outputs`), so it is produced in the same
per-partition transaction as the result and the input offsets, and deduplicated with them:
each sampled answer reaches ``review_topic`` exactly once, keyed by its trace ID.

A record over :data:`MAX_REVIEW_RECORD_BYTES` (a question or answer near the 1 MB span limit,
thousands of claims, 32 passages of 4000 multi-byte characters) is not written, with a warning:
Kafka refuses a message over its 1 MB limit, and since the record is rebuilt for every retry
of the commit, producing it would fail the partition's transaction on every retry, for ever.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Final

from citemon.core.records import AnswerScore
from citemon.review.sample import review_record, review_selected
from citemon.service.entries import OutMessage
from citemon.service.fitting import RecordLimits
from citemon.service.settings import Settings

__all__ = ["MAX_REVIEW_RECORD_BYTES", "review_message"]

log = logging.getLogger(__name__)

MAX_REVIEW_RECORD_BYTES: Final = 900_000
"""A larger review record is not written: under Kafka's default 1 MB ``message.max.bytes`` (and
the producer's ``max_request_size``), as dead letters are (:mod:`citemon.service.batches`)."""


def review_message(
    score: AnswerScore,
    span_id: str | None,
    settings: Settings,
    limits: RecordLimits | None = None,
) -> OutMessage | None:
    """The review record of ``score`` as a message for ``settings.review_topic``, or ``None``
    when the review sample does not pick it (or has no trace ID to pick it by), or when its
    record would not fit the topic's limit (not written, with a warning; the caller counts
    it: ``review_selected`` tells the two apart)."""
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
