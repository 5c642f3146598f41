"""The Collector path for real: service → OTLP → the project's Collector → Kafka → citemon run.

The Collector is the one ``make collector`` builds (deploy/otelcol-builder.yaml) running
``deploy/otel-collector.yaml`` itself, with only ports and topic overridden (see
collector_support.py) — so its ``compression: lz4``, the setting that crashed the monitor on
its first message before cramjam, is what these tests run. The monitor is ``citemon run`` as a
process, read through its ``/metrics``; the expected verdicts are the same judge's offline
scores of the same answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml
from aiokafka import TopicPartition
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.samples import Sample

from citemon._core.errors import DecodeError
from citemon._core.records import AnswerRecord
from citemon._demo.data import QUESTIONS, answer
from citemon._otlp.assembly import TraceAssembler
from citemon._otlp.decoding import decode_otlp_proto
from citemon._service.kafka import CODECS
from citemon_instrumentation import answer_span, record_answer
from tests.integration.collector_support import (
    SHIPPED_CONFIG,
    RunningCollector,
    batch_codecs,
    collector_binary,
    fully_committed,
    metric_samples,
    override,
    run_collector,
    total,
)
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    expected_verdicts,
    metric_sum,
    ready,
    run_monitor,
    settings_for,
    start_process,
    verdicts_by_version,
    wait_for,
)
from tests.integration.prometheus_support import free_port

SERVICE = "collector-bot"
DONE_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def otelcol() -> Path:
    return collector_binary()


def _resource(version: str, service: str = SERVICE) -> Resource:
    return Resource.create(
        {
            "service.name": service,
            "service.version": version,
            "deployment.environment.name": "collector-test",
        }
    )


def _otlp_exporter(protocol: str, collector: RunningCollector) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=collector.grpc_endpoint, insecure=True)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter(endpoint=collector.http_endpoint)


def _passages(record: AnswerRecord) -> list[dict[str, object]]:
    return [{"id": p.id, "text": p.text, "metadata": {"source": p.source}} for p in record.passages]


def serve_answers(
    provider: TracerProvider, version: str, n: int, *, bug: bool
) -> list[AnswerRecord]:
    """A RAG handler on the shim: even answers inside ``answer_span``, odd via ``record_answer``."""
    faults = ["correct", "misattributed", "uncited", "over_broad"]
    records = []
    for i in range(n):
        record = answer(
            QUESTIONS[i % len(QUESTIONS)],
            faults[i % len(faults)],
            f"{version}-{i}",
            first_passage_bug=bug,
            service=SERVICE,
            version=version,
            environment="collector-test",
        )
        if i % 2 == 0:
            with answer_span(record.question, tracer_provider=provider) as span:
                span.set_passages(_passages(record))
                span.set_answer(record.answer)
        else:
            record_answer(
                question=record.question,
                answer=record.answer,
                passages=_passages(record),
                tracer_provider=provider,
            )
        records.append(record)
    return records


def _flags(bootstrap: str, topic: str, port: int) -> list[str]:
    return [
        "--bootstrap-servers", bootstrap, "--topic", topic, "--group", f"g.{topic}",
        "--dlq-topic", f"{topic}.dlq", "--metrics-port", str(port),
        "--metrics-host", "127.0.0.1", "--commit-interval", "0.2", "--budget-per-minute", "0",
        "--judge", "lexical",
    ]  # fmt: skip


async def _monitor_until_done(
    bootstrap: str, topic: str, n: int, tmp_path: Path, partitions: int = 3
) -> list[Sample]:
    """Run ``citemon run`` until it counted ``n`` answers and committed the topic to its end;
    returns its final ``/metrics`` samples."""
    port = free_port()
    proc = start_process(_flags(bootstrap, topic, port), log_path=tmp_path / "run.log")
    try:
        await wait_for(lambda: ready(port), 30, "the monitor to be ready")

        def counted() -> float:
            return total(metric_samples(port), "citemon_answers_total")

        await wait_for(lambda: counted() >= n, DONE_TIMEOUT_S, f"{n} answers counted")
        deadline = asyncio.get_running_loop().time() + DONE_TIMEOUT_S
        while not await fully_committed(bootstrap, topic, f"g.{topic}", partitions):
            assert asyncio.get_running_loop().time() < deadline, "the topic was not committed"
            await asyncio.sleep(0.2)
        samples = await asyncio.to_thread(metric_samples, port)
        assert proc.poll() is None
    finally:
        proc.terminate()
        rc = await asyncio.to_thread(proc.wait, 30)
    assert rc == 0, (tmp_path / "run.log").read_text()[-3000:]
    return samples


def _verdicts(samples: list[Sample]) -> dict[str, Counter[str]]:
    """``citemon_claims_total`` per version and verdict, as ``expected_verdicts`` gives them."""
    out: dict[str, Counter[str]] = {}
    for s in samples:
        if s.name == "citemon_claims_total" and s.value:
            out.setdefault(s.labels["version"], Counter())[s.labels["verdict"]] += int(s.value)
    return out


def test_the_collector_validates_the_shipped_config_and_rejects_a_broken_one(
    otelcol: Path, tmp_path: Path
) -> None:
    ok = subprocess.run(
        [str(otelcol), "validate", "--config", str(SHIPPED_CONFIG)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    # The test overrides validate together with it, too.
    extra = tmp_path / "override.yaml"
    extra.write_text(yaml.safe_dump(override("t", 14317, 14318, "zstd")))
    merged = subprocess.run(
        [str(otelcol), "validate", "--config", str(SHIPPED_CONFIG), "--config", str(extra)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert merged.returncode == 0, merged.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text(SHIPPED_CONFIG.read_text().replace("compression: lz4", "compression: lz5"))
    bad = subprocess.run(
        [str(otelcol), "validate", "--config", str(broken)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "lz5" in bad.stderr + bad.stdout


@pytest.mark.parametrize("protocol", ["grpc", "http"])
async def test_shim_service_over_otlp_through_the_collector_is_scored_exactly(
    otelcol: Path,
    kafka_bootstrap: str,
    kafka_topic: TopicFactory,
    tmp_path: Path,
    protocol: str,
) -> None:
    topic = await kafka_topic(partitions=3)
    sent: list[AnswerRecord] = []
    with run_collector(otelcol, tmp_path, kafka_bootstrap, topic) as collector:
        for version, n, bug in (("v1", 12, False), ("v2", 8, True)):
            provider = TracerProvider(resource=_resource(version))
            provider.add_span_processor(
                BatchSpanProcessor(_otlp_exporter(protocol, collector), schedule_delay_millis=100)
            )
            sent += serve_answers(provider, version, n, bug=bug)
            assert provider.force_flush(30_000), "the OTLP exporter did not flush"
            provider.shutdown()
    # The Collector flushed its queue to Kafka when it stopped (SIGTERM).
    expected = await expected_verdicts(sent)
    samples = await _monitor_until_done(kafka_bootstrap, topic, len(sent), tmp_path)
    for version, n in (("v1", 12), ("v2", 8)):
        counted = total(samples, "citemon_answers_total", service=SERVICE, version=version)
        assert counted == n, f"{version}: {counted} of {n}"
    assert total(samples, "citemon_answers_total") == len(sent)
    assert _verdicts(samples) == expected
    assert total(samples, "citemon_dead_letters_total") == 0
    assert total(samples, "citemon_spans_total", outcome="invalid") == 0
    # What the Collector wrote really is lz4, as the shipped config says.
    codecs = {
        c
        for p in range(3)
        for *_, c in await batch_codecs(kafka_bootstrap, TopicPartition(topic, p))
    }
    assert codecs == {"lz4"}


# The instrumentor calls a LangChain API that langchain-core 1.x deprecates (see
# test_openinference.py): its warning, not ours.
@pytest.mark.filterwarnings("ignore::langchain_core._api.deprecation.LangChainDeprecationWarning")
async def test_openinference_langchain_chain_through_the_collector_is_scored_exactly(
    otelcol: Path, kafka_bootstrap: str, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    docs = [
        Document(id="p-3310", page_content="Audit log retention is 90 days on the Business plan."),
        Document(id="p-3311", page_content="Retention cannot be configured from the dashboard."),
    ]
    responses = [
        "Audit logs are retained for 90 days on the Business plan. [p-3310]",  # correct
        "Audit logs are retained for 90 days on the Business plan. [p-3311]",  # misattributed
        "Retention cannot be configured from the dashboard.",  # uncited
    ]
    n = 9
    topic = await kafka_topic(partitions=3)
    captured = InMemorySpanExporter()  # the same spans, for the offline expectation
    provider = TracerProvider(resource=_resource("lc-1", service="lc-bot"))
    provider.add_span_processor(SimpleSpanProcessor(captured))
    instrumentor = LangChainInstrumentor()
    with run_collector(otelcol, tmp_path, kafka_bootstrap, topic) as collector:
        provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(endpoint=collector.grpc_endpoint, insecure=True),
                schedule_delay_millis=100,
            )
        )
        instrumentor.instrument(tracer_provider=provider)
        try:
            store = InMemoryVectorStore(DeterministicFakeEmbedding(size=32))
            store.add_documents(docs)
            retriever = store.as_retriever(search_kwargs={"k": len(docs)})
            prompt = ChatPromptTemplate.from_template("Context:\n{context}\nQ: {question}")
            chain = (
                {"context": retriever, "question": RunnablePassthrough()}
                | prompt
                | FakeListChatModel(responses=responses)
                | StrOutputParser()
            )
            for i in range(n):
                chain.invoke(f"How long do we keep audit logs? ({i})")
        finally:
            instrumentor.uninstrument()  # it patches langchain globally
        assert provider.force_flush(30_000)
        provider.shutdown()
    records = _assemble(captured)
    assert len(records) == n
    expected = await expected_verdicts(records)
    assert expected["lc-1"] == Counter({"correct": 3, "misattributed": 3, "uncited": 3})
    samples = await _monitor_until_done(kafka_bootstrap, topic, n, tmp_path)
    assert total(samples, "citemon_answers_total", service="lc-bot", version="lc-1") == n
    assert total(samples, "citemon_answers_total") == n
    assert _verdicts(samples) == expected
    assert total(samples, "citemon_dead_letters_total") == 0


def _assemble(exporter: InMemorySpanExporter) -> list[AnswerRecord]:
    """The monitor's own trace assembly over the captured spans, one OTLP message per trace."""
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        assert span.context is not None
        by_trace.setdefault(span.context.trace_id, []).append(span)
    assembler = TraceAssembler()
    out: list[AnswerRecord] = []
    for spans in by_trace.values():
        try:
            batch = decode_otlp_proto(encode_spans(spans).SerializeToString())
        except DecodeError:
            continue
        out += batch.records
        out += assembler.add(batch.spans)
    return out


async def test_every_collector_compression_is_consumed(
    otelcol: Path, kafka_bootstrap: str, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    """One Collector per ``compression:`` value, all writing one topic; one monitor reads it."""
    topic = await kafka_topic(partitions=3)
    sent: list[AnswerRecord] = []
    with contextlib.ExitStack() as stack:
        collectors = {
            codec: stack.enter_context(
                run_collector(
                    otelcol, tmp_path, kafka_bootstrap, topic, compression=codec, name=codec
                )
            )
            for codec in CODECS
        }
        providers = []
        for codec, collector in collectors.items():
            provider = TracerProvider(resource=_resource(f"c-{codec}"))
            provider.add_span_processor(
                BatchSpanProcessor(_otlp_exporter("grpc", collector), schedule_delay_millis=100)
            )
            sent += serve_answers(provider, f"c-{codec}", 4, bug=False)
            providers.append(provider)
        for provider in providers:
            assert provider.force_flush(30_000)
            provider.shutdown()
    codecs = {
        c
        for p in range(3)
        for *_, c in await batch_codecs(kafka_bootstrap, TopicPartition(topic, p))
    }
    assert codecs == set(CODECS), f"batches in the topic: {codecs}"
    expected = await expected_verdicts(sent)
    settings = settings_for(kafka_bootstrap, topic)
    async with run_monitor(settings) as m:
        await wait_for(
            lambda: metric_sum(m.registry, "citemon_answers_total") >= len(sent),
            DONE_TIMEOUT_S,
            "every answer",
        )
        deadline = asyncio.get_running_loop().time() + DONE_TIMEOUT_S
        while not await fully_committed(kafka_bootstrap, topic, f"g.{topic}", 3):
            assert asyncio.get_running_loop().time() < deadline, "the topic was not committed"
            await asyncio.sleep(0.2)
        for codec in CODECS:
            assert metric_sum(m.registry, "citemon_answers_total", version=f"c-{codec}") == 4
        assert metric_sum(m.registry, "citemon_answers_total") == len(sent)
        assert verdicts_by_version(m.registry) == expected
        assert metric_sum(m.registry, "citemon_dead_letters_total") == 0
