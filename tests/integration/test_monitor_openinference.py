"""OpenInference two-span traces through Kafka: parts in separate messages, in either order.

Instrumentors such as LlamaIndex's put the documents on a RETRIEVER span and the answer on the
root CHAIN span; a batching exporter may ship them in different Kafka messages. The monitor must
assemble each trace and score it exactly once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import metric_sum, run_monitor, settings_for

PASSAGES = {
    "n-1": "Audit logs are kept for 90 days on the Business plan.",
    "n-2": "Enterprise workspaces keep audit logs for 365 days.",
}
ANSWER = (
    "Audit logs are kept for 90 days on the Business plan [n-2]. Enterprise keeps 365 days [n-2]."
)


def traces(n: int) -> list[list[ReadableSpan]]:
    """``n`` LlamaIndex-shaped traces: query (CHAIN, root) → retrieve (RETRIEVER) → synthesize."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "oi-bot", "service.version": "oi-1"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("oi")
    out = []
    for _ in range(n):
        with tracer.start_as_current_span(
            "query", attributes={"openinference.span.kind": "CHAIN", "input.value": "how long?"}
        ) as root:
            docs = {}
            for i, (pid, text) in enumerate(PASSAGES.items()):
                docs[f"retrieval.documents.{i}.document.id"] = pid
                docs[f"retrieval.documents.{i}.document.content"] = text
            tracer.start_span(
                "retrieve", attributes={"openinference.span.kind": "RETRIEVER", **docs}
            ).end()
            tracer.start_span(
                "synthesize", attributes={"openinference.span.kind": "LLM", "output.value": ANSWER}
            ).end()
            root.set_attribute("output.value", ANSWER)
        out.append(list(exporter.get_finished_spans()))
        exporter.clear()
    return out


async def send(
    bootstrap: str, topic: str, parts: Sequence[tuple[bytes, list[ReadableSpan]]]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, spans in parts:
            await producer.send_and_wait(topic, encode_spans(spans).SerializeToString(), key=key)
    finally:
        await producer.stop()


async def test_two_span_traces_split_across_messages_are_scored_once(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=3)
    parts: list[tuple[bytes, list[ReadableSpan]]] = []
    all_traces = traces(6)
    for i, spans in enumerate(all_traces):
        key = f"{spans[0].context.trace_id:032x}".encode()
        children = [s for s in spans if s.parent is not None]
        root = [s for s in spans if s.parent is None]
        # Half the traces arrive children first, half root first.
        parts += [(key, children), (key, root)] if i % 2 else [(key, root), (key, children)]
    await send(kafka_bootstrap, topic, parts)
    settings = settings_for(kafka_bootstrap, topic)
    async with run_monitor(settings) as mon:
        # Every part committed, hence every trace counted: a second scoring would be too.
        await asyncio.wait_for(mon.pipeline.caught_up(), 60)
        labels = {"service": "oi-bot", "version": "oi-1"}
        assert metric_sum(mon.registry, "citemon_answers_total", **labels) == len(all_traces)
        # The first claim cites n-2 but n-1 says it: misattributed; the second is correct.
        assert metric_sum(mon.registry, "citemon_claims_total", verdict="misattributed") == 6
        assert metric_sum(mon.registry, "citemon_claims_total", verdict="correct") == 6
        assert metric_sum(mon.registry, "citemon_dead_letters_total") == 0
