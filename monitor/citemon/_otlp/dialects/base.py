"""The one interface every trace dialect implements."""

from __future__ import annotations

from typing import Protocol

from citemon._core.records import AnswerRecord
from citemon._otlp.spans import NOT_AN_ANSWER, Limits, NotAnAnswer, RawSpan, TraceSpan

__all__ = ["NOT_AN_ANSWER", "Dialect", "SpanReading"]

SpanReading = AnswerRecord | TraceSpan | NotAnAnswer | None
"""What a dialect makes of one span (:meth:`Dialect.read_span`)."""


class Dialect(Protocol):
    """Where one family of instrumentations keeps a trace's passages and its answer.

    :meth:`read_span` looks at one span and returns what of an answer it holds, in this
    dialect's terms: a complete :class:`~citemon._core.records.AnswerRecord` when the span is
    self-contained (the citemon shim's ``rag.answer``); a :class:`~citemon._otlp.spans.TraceSpan`
    carrying ``documents`` (the retrieved passages) and/or ``answer`` (a candidate for the
    final answer), which the trace assembler joins with the trace's other parts; or ``None``
    when the span holds nothing this dialect reads (:data:`NOT_AN_ANSWER` when it is the
    dialect's answer span with nothing to score: skipped). A span that is this dialect's but
    malformed or over the :class:`~citemon._otlp.spans.Limits` raises
    :class:`~citemon._core.errors.DecodeError`.

    The assembler takes the answer from the outermost answer-bearing part that ends after
    retrieval, so a dialect marks as answers only spans whose output is the answer's text
    (not a dump of framework objects).
    """

    @property
    def name(self) -> str:
        """Short and stable: it appears in explanations (``citemon score --explain-input``)."""
        ...

    @property
    def looks_for(self) -> tuple[str, str]:
        """Where this dialect looks for (the passages, the answer), in a few words: what
        ``citemon score`` tells a user whose trace gave no answer."""
        ...

    def read_span(self, raw: RawSpan, limits: Limits) -> SpanReading: ...
