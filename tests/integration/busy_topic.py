"""A busy spans topic (docs/running.md, "A busy spans topic"): RAG traces whose two parts arrive
far apart among a service's other telemetry, as a Collector that batches spans as they end
writes them.

* A RAG trace is the specimen (docs/design.md) in two OpenInference spans, made by the
  OpenTelemetry SDK: its RETRIEVER span (the three passages), exported first, and its root CHAIN
  span (question and answer), exported when the request ends, ``gap`` messages later.
* Another trace is an HTTP request with nothing any dialect reads: a SERVER root span, a
  database CLIENT child and an outgoing HTTP CLIENT child, in one message.

Every message is keyed by its trace ID, as the Collector's ``partition_traces_by_id`` does. Used
by ``tests/integration/test_busy_topic.py`` and ``bench/busy_topic.py``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Final

from aiokafka import AIOKafkaProducer
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citemon._core.records import Verdict
from tests.oracles import OracleJudge

QUESTION: Final = "How long do we keep audit logs, and can I extend it?"
PASSAGES: Final = {
    "p-3310": "Audit log retention is 90 days on the Business plan and 365 days on Enterprise.",
    "p-3311": "Retention cannot be configured from the dashboard. Contact your account manager "
    "to discuss extensions.",
    "p-3312": "Enterprise agreements may include custom data retention terms negotiated at "
    "contract signing.",
}
ANSWER: Final = (
    "Audit logs are retained for 90 days on the Business plan. [p-3310] "
    "Retention can be extended through a custom term in an Enterprise agreement. [p-3310] "
    "Changing it is not possible from the dashboard. [p-3312]"
)
"""The specimen: 3 cited claims, 1 correct and 2 misattributed (accuracy 0.33)."""

_TRUTH: Final = {
    "Audit logs are retained for 90 days on the Business plan.": {"p-3310"},
    "Retention can be extended through a custom term in an Enterprise agreement.": {"p-3312"},
    "Changing it is not possible from the dashboard.": {"p-3311"},
}
"""Which passage entails each claim (docs/design.md's specimen)."""


class _SpecimenJudge(OracleJudge):
    """The specimen's truth, each call taking ``CITEMON_TEST_JUDGE_DELAY_S`` (default 0)."""

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        delay = float(os.environ.get("CITEMON_TEST_JUDGE_DELAY_S", "0"))
        if delay:
            await asyncio.sleep(delay)
        self.calls.clear()  # a long run would keep every call
        return await super().entails(claim, passages)


def specimen_judge() -> OracleJudge:
    """``--judge tests.integration.busy_topic:specimen_judge``: a judge that knows the
    specimen's truth (a fake model), so every answer scores exactly as the design says."""
    return _SpecimenJudge(_TRUTH)


Message = tuple[bytes, bytes]
"""(key, value): one OTLP ``ExportTraceServiceRequest`` keyed by its trace ID."""


def _key(span: ReadableSpan) -> bytes:
    assert span.context is not None
    return f"{span.context.trace_id:032x}".encode()


def whole(traces: Sequence[tuple[Message, Message]]) -> list[Message]:
    """Each trace in one message (its retriever's and its root's ``ResourceSpans`` joined: a
    repeated protobuf field concatenates), as an exporter that batches a whole request sends."""
    return [(key, first + second) for (key, first), (_, second) in traces]


def rag_traces(n: int) -> list[tuple[Message, Message]]:
    """``n`` specimen traces, each as (its retriever's message, its root's message)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "rag-bot", "service.version": "v1"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("busy-topic")
    docs: dict[str, str] = {}
    for i, (pid, text) in enumerate(PASSAGES.items()):
        docs[f"retrieval.documents.{i}.document.id"] = pid
        docs[f"retrieval.documents.{i}.document.content"] = text
    out: list[tuple[Message, Message]] = []
    for _ in range(n):
        root = tracer.start_span(
            "rag",
            attributes={
                "openinference.span.kind": "CHAIN",
                "input.value": QUESTION,
                "output.value": ANSWER,
            },
        )
        with trace.use_span(root, end_on_exit=True):
            tracer.start_span(
                "retrieve", attributes={"openinference.span.kind": "RETRIEVER", **docs}
            ).end()
        retriever, chain = exporter.get_finished_spans()
        exporter.clear()
        key = _key(chain)
        out.append(
            (
                (key, encode_spans([retriever]).SerializeToString()),
                (key, encode_spans([chain]).SerializeToString()),
            )
        )
    return out


def other_traces(n: int, *, roots: bool = True) -> list[Message]:
    """``n`` HTTP requests with a database call and an outgoing call: nothing for citemon
    (``roots=False``: their two children only, as an exporter sends a batch that ended first)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "orders-api", "service.version": "v7"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("busy-topic")
    out: list[Message] = []
    for i in range(n):
        server = tracer.start_span(
            "GET /api/orders/{id}",
            kind=trace.SpanKind.SERVER,
            attributes={
                "http.request.method": "GET",
                "http.route": "/api/orders/{id}",
                "url.path": f"/api/orders/{i}",
                "http.response.status_code": 200,
            },
        )
        with trace.use_span(server, end_on_exit=True):
            tracer.start_span(
                "SELECT orders",
                kind=trace.SpanKind.CLIENT,
                attributes={
                    "db.system.name": "postgresql",
                    "db.query.text": "SELECT * FROM orders WHERE id = $1",
                },
            ).end()
            tracer.start_span(
                "GET",
                kind=trace.SpanKind.CLIENT,
                attributes={"http.request.method": "GET", "url.full": "http://stock/api"},
            ).end()
        spans = exporter.get_finished_spans()
        exporter.clear()
        sent = list(spans) if roots else list(spans[:-1])
        out.append((_key(spans[-1]), encode_spans(sent).SerializeToString()))
    return out


def interleave(
    rag: Sequence[tuple[Message, Message]], other: Sequence[Message], gap: int
) -> list[Message]:
    """The topic's messages in order: the other traces as the steady background, each RAG
    trace's retriever among them and its root ``gap`` messages after it (0: right after)."""
    total = len(other) + 2 * len(rag)
    if rag and gap + 2 > total:
        raise ValueError(f"a gap of {gap} needs more than {total} messages")
    room = max(1, total - gap - 1)
    stride = room / max(1, len(rag))
    slots: list[Message | None] = [None] * total
    for i, (retriever, root) in enumerate(rag):
        at = int(i * stride)
        while slots[at] is not None:
            at += 1
        slots[at] = retriever
        later = at + gap + 1
        while later < total and slots[later] is not None:
            later += 1
        if later >= total:  # pragma: no cover - the room above leaves space
            raise ValueError("no slot left for a root")
        slots[later] = root
    filler = iter(other)
    return [slot if slot is not None else next(filler) for slot in slots]


async def produce(bootstrap: str, topic: str, messages: Sequence[Message]) -> None:
    """Publish ``messages`` in order (each keyed by its trace ID)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in messages]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
