"""The OpenTelemetry shim a RAG service imports: answer spans in, for citemon to score.

::

    from instrumentation import answer_span, record_answer

    with answer_span(question) as span:          # a `rag.answer` span, current for its body
        passages = retrieve(question); span.set_passages(passages)
        answer = generate(question, passages); span.set_answer(answer)

    record_answer(question=q, answer=a, passages=[{"id": "p-1", "text": "…"}])

Services without an OpenTelemetry Collector can ship spans straight to Kafka with
:class:`KafkaSpanExporter` (byte-compatible with the Collector's ``kafka`` exporter).
"""

from instrumentation._kafka import KafkaSpanExporter
from instrumentation._shim import (
    DEFAULT_MAX_PASSAGES,
    STATS,
    AnswerSpan,
    PassageLike,
    Redact,
    ShimStats,
    answer_span,
    record_answer,
)

__all__ = [
    "DEFAULT_MAX_PASSAGES",
    "STATS",
    "AnswerSpan",
    "KafkaSpanExporter",
    "PassageLike",
    "Redact",
    "ShimStats",
    "answer_span",
    "record_answer",
]
