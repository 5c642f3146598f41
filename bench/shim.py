"""Shim cost per answer (10 passages of 1 KB) ÷ a bare OpenTelemetry span with the same attributes.

Both run against the same SDK pipeline (TracerProvider → BatchSpanProcessor → an exporter that
discards), interleaved round by round in one process so drift hits both; the figure is the ratio
of medians. "Bare" is what a hand-written handler would do (build the OpenInference keys, one
``set_attributes``); "bare, prebuilt dict" skips even building the attribute dict, a floor no
real handler reaches. Target: shim ÷ bare ≤ 1.15.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from citemon_instrumentation import ShimStats, answer_span, record_answer

ROUNDS = 25
CALLS_PER_ROUND = 400
PASSAGES = [
    {"id": f"p-{i}", "text": (f"passage {i} " * 100)[:1024], "score": 1 - i / 20} for i in range(10)
]
QUESTION = "How long do we keep audit logs, and can I extend it?"
ANSWER = "Audit logs are retained for 90 days on the Business plan. [p-3] " * 3


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _bench(fn: Callable[[], None]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    for _ in range(CALLS_PER_ROUND):
        fn()
    return (time.perf_counter() - t0) / CALLS_PER_ROUND


def document_attributes() -> dict[str, Any]:
    """The attributes the shim records, built the plain way (what a bare span is charged)."""
    attrs: dict[str, Any] = {"citemon.passages.count": len(PASSAGES)}
    for i, p in enumerate(PASSAGES):
        attrs[f"retrieval.documents.{i}.document.id"] = p["id"]
        attrs[f"retrieval.documents.{i}.document.content"] = p["text"]
        attrs[f"retrieval.documents.{i}.document.score"] = p["score"]
    attrs["citemon.truncated"] = False
    return attrs


def run() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    provider.add_span_processor(BatchSpanProcessor(_Discard(), max_queue_size=8192))
    tracer = provider.get_tracer("bench")
    stats = ShimStats()

    def shim_one_shot() -> None:
        record_answer(
            question=QUESTION,
            answer=ANSWER,
            passages=PASSAGES,
            tracer_provider=provider,
            stats=stats,
        )

    def shim_context_manager() -> None:
        with answer_span(QUESTION, tracer_provider=provider, stats=stats) as span:
            span.set_passages(PASSAGES)
            span.set_answer(ANSWER)

    def bare() -> None:
        span = tracer.start_span(
            "rag.answer", attributes={"openinference.span.kind": "CHAIN", "input.value": QUESTION}
        )
        span.set_attributes(document_attributes())
        span.set_attribute("output.value", ANSWER)
        span.end()

    def bare_current() -> None:
        with tracer.start_as_current_span(
            "rag.answer", attributes={"openinference.span.kind": "CHAIN", "input.value": QUESTION}
        ) as span:
            span.set_attributes(document_attributes())
            span.set_attribute("output.value", ANSWER)

    prebuilt = document_attributes()

    def bare_prebuilt() -> None:
        span = tracer.start_span(
            "rag.answer", attributes={"openinference.span.kind": "CHAIN", "input.value": QUESTION}
        )
        span.set_attributes(prebuilt)
        span.set_attribute("output.value", ANSWER)
        span.end()

    variants = {
        "bare span": bare,
        "bare span, prebuilt dict": bare_prebuilt,
        "bare current span": bare_current,
        "shim record_answer": shim_one_shot,
        "shim answer_span": shim_context_manager,
    }
    for fn in variants.values():  # warm up caches and the processor's queue
        for _ in range(200):
            fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants)
    rng = random.Random(7)
    for _ in range(ROUNDS):
        rng.shuffle(order)
        for name in order:
            times[name].append(_bench(variants[name]))
    provider.shutdown()
    assert stats.errors == 0 and stats.truncated == 0

    med = {name: statistics.median(v) for name, v in times.items()}
    print(
        f"per answer, 10 passages × 1 KB, "
        f"median of {ROUNDS} interleaved rounds × {CALLS_PER_ROUND}:"
    )
    for name, m in med.items():
        print(f"  {name:<26} {m * 1e6:8.1f} µs")
    base = med["bare span"]
    ratios = [
        ("shim record_answer ÷ bare span", med["shim record_answer"] / base, "  (target ≤ 1.15)"),
        (
            "shim answer_span ÷ bare current span",
            med["shim answer_span"] / med["bare current span"],
            "",
        ),
        (
            "shim record_answer ÷ prebuilt dict",
            med["shim record_answer"] / med["bare span, prebuilt dict"],
            "",
        ),
    ]
    for label, ratio, note in ratios:
        print(f"  {label:<38} = {ratio:.3f}{note}")
