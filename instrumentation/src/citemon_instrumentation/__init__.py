"""The OpenTelemetry shim a RAG service imports: answer spans in, for citemon to score.

::

    from citemon_instrumentation import answer_span, record_answer

    with answer_span(question) as span:          # a `rag.answer` span, current for its body
        passages = retrieve(question); span.set_passages(passages)
        answer = generate(question, passages); span.set_answer(answer)

    record_answer(question=q, answer=a, passages=[{"id": "p-1", "text": "…"}])

Where the provider returns citations as structure (Anthropic, OpenAI, Cohere, Gemini), one
helper per provider records them with the passages and the answer from its response object::

    with answer_span(question) as span:
        response = client.messages.create(model=..., messages=messages)
        record_anthropic_citations(span, response, messages=messages)

Services without an OpenTelemetry Collector can ship spans straight to Kafka with
:class:`KafkaSpanExporter` (byte-compatible with the Collector's ``kafka`` exporter; install the
``[kafka]`` extra). It is imported on first use (module ``__getattr__``), so importing this
package costs the OpenTelemetry API and nothing else: no aiokafka, SDK or OTLP encoder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from citemon_instrumentation._citations import (
    record_anthropic_citations,
    record_cohere_citations,
    record_gemini_citations,
    record_openai_citations,
)
from citemon_instrumentation._shim import (
    DEFAULT_MAX_PASSAGES,
    STATS,
    AnswerSpan,
    PassageLike,
    Redact,
    ShimStats,
    answer_span,
    record_answer,
)

if TYPE_CHECKING:
    from citemon_instrumentation._kafka import KafkaSpanExporter

__all__ = [
    "DEFAULT_MAX_PASSAGES",
    "STATS",
    "AnswerSpan",
    "KafkaSpanExporter",
    "PassageLike",
    "Redact",
    "ShimStats",
    "__version__",
    "answer_span",
    "record_answer",
    "record_anthropic_citations",
    "record_cohere_citations",
    "record_gemini_citations",
    "record_openai_citations",
]


def __getattr__(name: str) -> Any:
    """``KafkaSpanExporter`` and ``__version__``, loaded when first asked for."""
    if name == "KafkaSpanExporter":
        try:
            from citemon_instrumentation._kafka import KafkaSpanExporter
        except ImportError as exc:  # the SDK or the OTLP encoder is missing
            raise ImportError(
                f"KafkaSpanExporter needs the [kafka] extra ({exc.name} is not installed): "
                "pip install 'citemon-instrumentation[kafka]'",
                name=exc.name,
            ) from exc

        globals()[name] = KafkaSpanExporter
        return KafkaSpanExporter
    if name == "__version__":
        from citemon_instrumentation._shim import shim_version

        return shim_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
