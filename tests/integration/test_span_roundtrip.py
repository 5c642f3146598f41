"""shim → BatchSpanProcessor → KafkaSpanExporter → a real Kafka broker → aiokafka → decode."""

from __future__ import annotations

import asyncio
import socket
import time

from aiokafka import AIOKafkaConsumer
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citemon._core.records import AnswerRecord, Passage
from citemon._otlp.assembly import TraceAssembler
from citemon._otlp.decoding import decode_otlp_proto
from citemon_instrumentation import KafkaSpanExporter, answer_span, record_answer
from tests.integration.conftest import TopicFactory

RESOURCE = Resource.create(
    {
        "service.name": "support-bot",
        "service.version": "2026.11.3",
        "deployment.environment.name": "prod",
    }
)
PASSAGES = [
    {"id": "p-3310", "text": "Audit log retention is 90 days on the Business plan.", "score": 0.82},
    {"id": "p-3311", "text": "Contact your account manager to discuss extensions.", "score": 0.4},
]


async def _consume(
    bootstrap: str, topic: str, n: int, timeout_s: float = 20.0
) -> list[tuple[bytes, bytes, int]]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    out: list[tuple[bytes, bytes, int]] = []
    try:
        async with asyncio.timeout(timeout_s):
            while len(out) < n:
                batches = await consumer.getmany(timeout_ms=500)
                for tp, msgs in batches.items():
                    out += [(m.key, m.value, tp.partition) for m in msgs]
    finally:
        await consumer.stop()
    return out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_shim_to_kafka_to_record(kafka_bootstrap: str, kafka_topic: TopicFactory) -> None:
    topic = await kafka_topic(partitions=3)
    exporter = KafkaSpanExporter(kafka_bootstrap, topic, timeout_s=10)
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("app")

    def handler() -> None:  # the host's code, in a worker thread as a sync web handler would be
        with (
            tracer.start_as_current_span("POST /chat"),
            answer_span("How long do we keep audit logs?", tracer_provider=provider) as span,
        ):
            span.set_passages(PASSAGES)
            span.set_answer("Audit logs are kept 90 days. [p-3310]")
        record_answer(
            question="q2", answer="a2 [1]", passages=[("x-1", "t")], tracer_provider=provider
        )

    await asyncio.to_thread(handler)
    await asyncio.to_thread(provider.force_flush)
    assert (exporter.exported_spans, exporter.failed_spans, exporter.dropped_spans) == (3, 0, 0)

    messages = await _consume(kafka_bootstrap, topic, 2)
    # One message per trace, keyed by its trace ID in hex (the Collector's partition_traces_by_id).
    assert len(messages) == 2
    records: list[AnswerRecord] = []
    for key, value, _ in messages:
        batch = decode_otlp_proto(value)
        assert all(r.trace_id == key.decode() for r in batch.records)
        records += batch.records
    records.sort(key=lambda r: r.question)
    first = records[0]
    assert first.model_dump(exclude={"id", "span_id", "trace_id"}) == AnswerRecord(
        question="How long do we keep audit logs?",
        answer="Audit logs are kept 90 days. [p-3310]",
        passages=[Passage(id=p["id"], text=p["text"], score=p["score"]) for p in PASSAGES],
        service="support-bot",
        version="2026.11.3",
        environment="prod",
    ).model_dump(exclude={"id", "span_id", "trace_id"})
    assert first.id == first.span_id and len(first.trace_id or "") == 32
    assert records[1].passages == [Passage(id="x-1", text="t")]
    provider.shutdown()


async def test_one_trace_one_partition_even_when_split(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=3)
    # A small message cap forces the trace's spans into several messages: same key, same partition.
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("oi")
    with tracer.start_as_current_span(
        "query", attributes={"openinference.span.kind": "CHAIN"}
    ) as q:
        tracer.start_span(
            "retrieve",
            attributes={
                "openinference.span.kind": "RETRIEVER",
                "retrieval.documents.0.document.id": "n-1",
                "retrieval.documents.0.document.content": "x" * 1300,
            },
        ).end()
        q.set_attribute("output.value", "answer [n-1]")
    spans = memory.get_finished_spans()
    largest = max(len(encode_spans([s]).SerializeToString()) for s in spans)
    assert len(encode_spans(spans).SerializeToString()) > largest + 10
    exporter = KafkaSpanExporter(kafka_bootstrap, topic, max_message_bytes=largest + 10)
    try:
        assert await asyncio.to_thread(exporter.export, spans) is SpanExportResult.SUCCESS
    finally:
        await asyncio.to_thread(exporter.shutdown)
    assert exporter.exported_messages == 2
    messages = await _consume(kafka_bootstrap, topic, 2)
    assert len(messages) == 2 and len({(k, p) for k, _, p in messages}) == 1
    assembler = TraceAssembler()
    out: list[AnswerRecord] = []
    for _, value, _ in messages:
        out += assembler.add(decode_otlp_proto(value).spans)
    (record,) = out
    assert record.answer == "answer [n-1]" and record.passages[0].text == "x" * 1300
    provider.shutdown()


async def test_broker_down_fails_within_the_timeout_and_never_raises() -> None:
    exporter = KafkaSpanExporter(f"127.0.0.1:{_closed_port()}", timeout_s=2.0)
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    record_answer(question="q", answer="a", passages=[("p", "t")], tracer_provider=provider)
    spans = memory.get_finished_spans()

    t0 = time.monotonic()
    result = await asyncio.to_thread(exporter.export, spans)
    elapsed = time.monotonic() - t0
    assert result is SpanExportResult.FAILURE
    assert 0.5 < elapsed < 3.5  # retried inside the window, and gave up at its end
    assert (exporter.exported_spans, exporter.failed_spans, exporter.failed_exports) == (0, 1, 1)

    # Behind a BatchSpanProcessor the host's thread never waits on the broker: recording an
    # answer stays fast, and shutdown finishes in bounded time.
    host = TracerProvider(resource=RESOURCE)
    host.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    t0 = time.monotonic()
    for i in range(20):
        record_answer(question=f"q{i}", answer="a", passages=[("p", "t")], tracer_provider=host)
    assert time.monotonic() - t0 < 0.5
    await asyncio.sleep(0.2)
    t0 = time.monotonic()
    await asyncio.to_thread(host.shutdown)
    assert time.monotonic() - t0 < 8
    # Every span is accounted for: none delivered, each counted failed or dropped (1 + 20).
    assert exporter.exported_spans == 0 and exporter.failed_spans >= 2
    assert exporter.failed_spans + exporter.dropped_spans == 21, repr(exporter)
