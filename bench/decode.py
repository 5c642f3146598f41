"""Decode throughput: OTLP protobuf → ``AnswerRecord``s, spans per second on one core.

Payloads are what the shim really emits (10 passages of 1 KB per answer span), 50 spans per
message as a ``BatchSpanProcessor`` would batch them; also OpenInference traces (RETRIEVER +
LLM + CHAIN root) through decode and :class:`TraceAssembler`. For scale, the SDK's own
``encode_spans`` of the same spans is timed on this machine too (the issue quotes ~75 µs/span
for the Collector path's Python encode).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citemon._otlp.assembly import TraceAssembler
from citemon._otlp.decoding import decode_otlp_proto
from citemon_instrumentation import record_answer

ANSWERS = 1000
SPANS_PER_MESSAGE = 50
PASSAGES = [
    {"id": f"p-{i}", "text": (f"passage {i} " * 100)[:1024], "score": 0.5} for i in range(10)
]


def _spans() -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "bench", "service.version": "1"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    for i in range(ANSWERS):
        record_answer(
            question=f"q{i}",
            answer="It is so. [p-1] " * 4,
            passages=PASSAGES,
            tracer_provider=provider,
        )
    shim = list(exporter.get_finished_spans())
    exporter.clear()
    tracer = provider.get_tracer("oi")
    for i in range(ANSWERS):
        with tracer.start_as_current_span(
            "query", attributes={"openinference.span.kind": "CHAIN"}
        ) as q:
            docs = {"openinference.span.kind": "RETRIEVER", "input.value": f"q{i}"}
            for j, p in enumerate(PASSAGES):
                docs[f"retrieval.documents.{j}.document.id"] = p["id"]
                docs[f"retrieval.documents.{j}.document.content"] = p["text"]
            tracer.start_span("retrieve", attributes=docs).end()
            tracer.start_span(
                "llm",
                attributes={"openinference.span.kind": "LLM", "output.value": "It is so. [p-1]"},
            ).end()
            q.set_attribute("output.value", "It is so. [p-1]")
    return shim, list(exporter.get_finished_spans())


def _rate(fn: Callable[[], int], repeat: int = 3) -> float:
    best = 0.0
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        n = fn()
        best = max(best, n / (time.perf_counter() - t0))
    return best


def run() -> None:
    shim, oi = _spans()
    chunks = [shim[i : i + SPANS_PER_MESSAGE] for i in range(0, len(shim), SPANS_PER_MESSAGE)]
    payloads = [encode_spans(c).SerializeToString() for c in chunks]
    oi_payloads = [encode_spans(oi[i : i + 60]).SerializeToString() for i in range(0, len(oi), 60)]

    def decode_shim() -> int:
        n = 0
        for p in payloads:
            n += len(decode_otlp_proto(p).records)
        assert n == ANSWERS
        return n

    def decode_oi() -> int:
        assembler = TraceAssembler()
        records = 0
        for p in oi_payloads:
            records += len(assembler.add(decode_otlp_proto(p).spans))
        assert records == ANSWERS
        return len(oi)

    def encode() -> int:
        for c in chunks:
            encode_spans(c).SerializeToString()
        return len(shim)

    shim_rate = _rate(decode_shim)
    oi_rate = _rate(decode_oi)
    enc_rate = _rate(encode)
    mb = sum(map(len, payloads)) / 1e6
    print(
        f"{ANSWERS} shim answer spans (10 passages × 1 KB), {len(payloads)} messages, {mb:.1f} MB:"
    )
    rows = [
        ("decode_otlp_proto, shim spans", shim_rate),
        ("decode + assemble, OpenInference", oi_rate),
        ("SDK encode_spans, same shim spans", enc_rate),
    ]
    for label, rate in rows:
        print(f"  {label:<36} {rate:10,.0f} spans/s  ({1e6 / rate:6.1f} µs/span)")
    print(f"  decode cost ÷ encode cost            {enc_rate / shim_rate:.2f}")
