"""Which scored answers people review, and the review record each one becomes.

``--review-rate R`` picks a fraction R of scored answers by a hash of the trace ID: BLAKE2b
personalised ``citemon-review``, so the choice is independent of ``--sample-rate`` (which
compares the trace ID's low 64 bits, as OpenTelemetry's ``TraceIdRatioBased`` does) and of the
shuffle probe (BLAKE2b with its own personalisation). Every replica and every replay picks
the same answers, and the sample is uniform over the answers scored, so estimates from it are
unbiased for that traffic (docs/design.md, "Review loop and estimates").

:func:`review_record` builds the record from the score alone: the scorer keeps the question,
the answer and excerpts of up to :data:`~citemon._engine.excerpts.MAX_EXCERPT_CHARS` characters
of the passages the claims cite or are supported by (at most
:data:`~citemon._engine.excerpts.MAX_EXCERPTS` of them; the text the shim recorded, after its
``redact`` hook), so nothing is looked up later.
"""

from __future__ import annotations

import hashlib
from typing import Final

from citemon._core.records import AnswerScore
from citemon._engine.excerpts import MAX_EXCERPT_CHARS, recut
from citemon._review.model import ReviewClaim, ReviewRecord

__all__ = [
    "DEFAULT_REVIEW_PASSAGE_CHARS",
    "DEFAULT_REVIEW_TOPIC",
    "review_key",
    "review_record",
    "review_selected",
]

DEFAULT_REVIEW_TOPIC: Final = "citemon._review"
"""The review topic (``--review-topic`` / ``CITEMON_REVIEW_TOPIC``)."""

DEFAULT_REVIEW_PASSAGE_CHARS: Final = MAX_EXCERPT_CHARS
"""Characters kept of each passage in a review record (``--review-passage-chars``); the most
the scorer keeps, so a reviewer reads passages whole up to 4000 characters."""

_PERSON: Final = b"citemon-review"
_SCALE: Final = float(1 << 64)


def _digest(key: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(key.encode(), digest_size=8, person=_PERSON).digest(), "big"
    )


def review_selected(trace_id: str | None, rate: float) -> bool:
    """Whether the answer of ``trace_id`` goes to review at ``rate`` (never without an ID)."""
    if rate <= 0.0 or not trace_id:
        return False
    return rate >= 1.0 or _digest(trace_id) / _SCALE < rate


def review_key(score: AnswerScore) -> str:
    """The review record's ``trace_id``: the trace ID, else the answer's ``id``, else a stable
    hash of the answer text (offline answers), so every label has a key."""
    if score.trace_id:
        return score.trace_id
    if score.id:
        return score.id
    return "answer-" + hashlib.sha256(score.answer.encode()).hexdigest()[:16]


def review_record(
    score: AnswerScore,
    *,
    span_id: str | None = None,
    scored_at: str | None = None,
    passage_chars: int = DEFAULT_REVIEW_PASSAGE_CHARS,
) -> ReviewRecord:
    """The review record of a scored answer, each passage cut to ``passage_chars`` (at most
    :data:`~citemon._engine.excerpts.MAX_EXCERPT_CHARS`); ``passages_cut`` names those cut."""
    if not 1 <= passage_chars <= MAX_EXCERPT_CHARS:
        raise ValueError(f"passage_chars must be within [1, {MAX_EXCERPT_CHARS}]")
    full = score.passage_chars
    return ReviewRecord(
        trace_id=review_key(score),
        span_id=span_id,
        id=score.id,
        service=score.service,
        version=score.version,
        environment=score.environment,
        scored_at=scored_at,
        question=score.question,
        answer=score.answer,
        passages=recut(score.evidence, passage_chars),
        passages_cut=[pid for pid in score.evidence if full.get(pid, 0) > passage_chars],
        text_source={pid: src for pid, src in score.text_source.items() if pid in score.evidence},
        claims=[
            ReviewClaim(
                claim=i,
                sentence=c.sentence,
                text=c.text,
                cited_ids=list(c.cited_ids),
                verdict=c.verdict,
                supported_by=list(c.supported_by),
                reason=c.reason,
                unjudged_cause=c.unjudged_cause,
                faithful=c.faithful,
                overlap=c.overlap,
            )
            for i, c in enumerate(score.claims)
        ],
    )
