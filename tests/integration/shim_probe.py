"""The shim's spans as one interpreter records them, printed as JSON: run by
``test_shim_pythons.py`` on every Python the shim supports, with only the OpenTelemetry API and
SDK installed (``PYTHONPATH`` points at the shim's source), and compared across them.

Standard library and OpenTelemetry only, and nothing newer than the shim's floor (Python 3.10).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citemon_instrumentation import STATS, answer_span, record_answer, record_cohere_citations


class Doc:
    """A LangChain-like document: ``page_content`` and ``metadata``."""

    def __init__(self, text: str, **metadata: Any) -> None:
        self.page_content = text
        self.metadata = metadata


def main() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "probe-bot", "service.version": "v1"}),
        span_limits=SpanLimits(max_attributes=64, max_span_attribute_length=4096),
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))

    record_answer(
        question="What is the refund window?",
        answer="Refunds take 30 days [p-1]. Shipping is free [p-2].",
        passages=[
            {"id": "p-1", "text": "Refunds are processed within 30 days.", "score": 0.9},
            ("p-2", "Shipping is free on orders over $50."),
            Doc("Returns need a receipt.", id="p-3", source="policy.pdf"),
        ],
        tracer_provider=provider,
        redact=lambda text: text.replace("$50", "[amount]"),
    )
    with answer_span("How long is shipping?", tracer_provider=provider) as span:
        child = provider.get_tracer("probe").start_span("retrieve")
        child.end()
        span.set_passages([{"id": f"d-{i}", "text": f"passage {i}"} for i in range(40)])
        span.set_answer("Shipping takes 2 days [d-0] \udcff.")
    try:
        with answer_span("Does this fail?", tracer_provider=provider) as span:
            span.set_passages([("e-1", "text")])
            raise RuntimeError("the host's own error")
    except RuntimeError:
        pass
    record_answer(
        question="Too long?", answer="x" * 5000, passages=[("t-1", "y")], tracer_provider=provider
    )

    # A provider's native citations, from its response JSON (a Cohere v2 chat's).
    with answer_span("Refund window?", tracer_provider=provider) as span:
        record_cohere_citations(
            span,
            {
                "finish_reason": "COMPLETE",
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "Refunds take 30 days. Ship free."}],
                    "citations": [
                        {
                            "start": 0,
                            "end": 21,
                            "text": "Refunds take 30 days.",
                            "sources": [{"type": "document", "id": "p-1"}],
                        },
                    ],
                },
            },
            documents=[{"id": "p-1", "data": {"text": "Refunds are processed within 30 days."}}],
        )
    finished = memory.get_finished_spans()
    names = {o.context.span_id: o.name for o in finished}
    spans = []
    for s in finished:
        spans.append(
            {
                "name": s.name,
                "parent": names.get(s.parent.span_id) if s.parent else None,
                "status": s.status.status_code.name,
                "events": [e.name for e in s.events],
                "attributes": dict(sorted((k, _plain(v)) for k, v in s.attributes.items())),
            }
        )
    counts = {"answers": STATS.answers, "errors": STATS.errors, "truncated": STATS.truncated}
    print(json.dumps({"spans": spans, "stats": counts}, sort_keys=True))


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


if __name__ == "__main__":
    sys.exit(main())
