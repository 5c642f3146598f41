"""The review topic's message for a scored answer the review sample picks.

Built where the result message is (:meth:`Pipeline._outputs`), so it is produced in the same
per-partition transaction as the result and the input offsets, and deduplicated with them:
each sampled answer reaches ``review_topic`` exactly once, keyed by its trace ID.
"""

from __future__ import annotations

from datetime import UTC, datetime

from citemon.core.records import AnswerScore
from citemon.review.sample import review_record, review_selected
from citemon.service.entries import OutMessage
from citemon.service.settings import Settings

__all__ = ["review_message"]


def review_message(
    score: AnswerScore, span_id: str | None, settings: Settings
) -> OutMessage | None:
    """The review record of ``score`` as a message for ``settings.review_topic``, or ``None``
    when the review sample does not pick it (or has no trace ID to pick it by)."""
    if not review_selected(score.trace_id, settings.review_rate):
        return None
    record = review_record(
        score,
        span_id=span_id,
        scored_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        passage_chars=settings.review_passage_chars,
    )
    return OutMessage(settings.review_topic, record.trace_id.encode(), record.to_json().encode())
