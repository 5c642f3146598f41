"""What the monitor produces with a commit: dead letters and result records.

A dead letter keeps the original key and value and says why in headers
(:data:`ERROR_HEADER`, :data:`ERROR_MESSAGE_HEADER`, :data:`SOURCE_HEADER`); a result is the
:class:`~citemon.core.records.AnswerScore` as compact JSON keyed by trace ID, with the span
ID and, when asked, the recut passage excerpts. Both wait on the record's
:class:`~citemon.service.entries.Entry` and go out with its commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from citemon.core.records import AnswerScore
from citemon.engine.excerpts import recut
from citemon.review.sample import review_selected
from citemon.service.batches import BadBatch
from citemon.service.dedupe import DedupeWindow, Key
from citemon.service.entries import Entry, OutMessage, Ready
from citemon.service.fitting import RecordLimits, fit_dead_letter, fit_result
from citemon.service.review import review_message
from citemon.service.settings import Settings
from citemon.service.stats import PipelineStats

__all__ = [
    "ERROR_HEADER",
    "ERROR_MESSAGE_HEADER",
    "SOURCE_HEADER",
    "Counted",
    "add_batch_dead_letter",
    "add_dead_letter",
    "commit_outputs",
    "result_message",
]

ERROR_HEADER: Final = "citemon.error"
"""DLQ header holding the reason code (a ``DecodeError.reason``, or ``score_error``)."""
ERROR_MESSAGE_HEADER: Final = "citemon.error.message"
SOURCE_HEADER: Final = "citemon.source"
"""``topic/partition/offset`` of the dead-lettered record."""
_MAX_ERROR_MESSAGE_BYTES: Final = 512

Counted = list[tuple[AnswerScore, Key]]
"""Scores to count once a commit succeeded, each with its dedupe key."""


def add_dead_letter(
    entry: Entry[Any],
    dlq_topic: str,
    key: bytes | None,
    value: bytes,
    reason: str,
    message: str,
    *,
    partial: bool = False,
) -> None:
    """Put ``entry``'s record (or part of it) on the dead-letter topic with its commit."""
    headers = [
        (ERROR_HEADER, reason.encode()),
        (ERROR_MESSAGE_HEADER, message.encode()[:_MAX_ERROR_MESSAGE_BYTES]),
        (SOURCE_HEADER, f"{entry.tp.topic}/{entry.tp.partition}/{entry.offset}".encode()),
    ]
    if partial:
        headers.append(("citemon.partial", b"true"))
    entry.messages.append(OutMessage(dlq_topic, key, value, tuple(headers)))
    entry.dead_letters.append(reason)


def add_batch_dead_letter(entry: Entry[Any], dlq_topic: str, bad: BadBatch) -> None:
    """Put an undecodable record batch, whole, on the dead-letter topic with ``entry``'s commit."""
    headers = [
        (ERROR_HEADER, bad.reason.encode()),
        (ERROR_MESSAGE_HEADER, bad.error.encode()[:_MAX_ERROR_MESSAGE_BYTES]),
    ]
    entry.messages.append(bad.dead_letter(dlq_topic, headers))
    entry.dead_letters.append(bad.reason)


def result_message(
    settings: Settings,
    score: AnswerScore,
    span_id: str | None,
    limits: RecordLimits | None = None,
) -> OutMessage | None:
    """The results-topic record of a scored answer (None without a results topic), cut to
    fit the topic's limit (:func:`~citemon.service.fitting.fit_result`)."""
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


def commit_outputs(
    ready: Iterable[Ready[Any]],
    dedupe: DedupeWindow,
    settings: Settings,
    stats: PipelineStats,
    limits: RecordLimits | None = None,
) -> list[tuple[Ready[Any], list[OutMessage], Counted]]:
    """Per partition: the messages to produce with its commit, and the scores to count after
    it (deduplicated against the window of committed answers and within the batch). Every
    message fits its topic's limit (:mod:`citemon.service.fitting`)."""
    limits = limits or RecordLimits()
    out: list[tuple[Ready[Any], list[OutMessage], Counted]] = []
    batch_keys: set[Key] = set()
    for r in ready:
        messages: list[OutMessage] = []
        counted: Counted = []
        r.cuts = []
        for e in r.entries:
            messages.extend(fit_dead_letter(m, limits) for m in e.messages)
            for score, span_id in e.scores:
                key = (score.trace_id, span_id)
                if key != (None, None) and (key in dedupe or key in batch_keys):
                    stats.duplicates += 1
                    continue
                batch_keys.add(key)
                counted.append((score, key))
                result = result_message(settings, score, span_id, limits)
                if result is not None:
                    messages.append(result)
                review = review_message(score, span_id, settings, limits)
                if review is not None:
                    messages.append(review)
                elif review_selected(score.trace_id, settings.review_rate):
                    r.cuts.append(("review", "dropped"))
        r.cuts.extend(cut for m in messages for cut in m.cut)
        out.append((r, messages, counted))
    return out
