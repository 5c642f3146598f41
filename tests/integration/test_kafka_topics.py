"""Nothing stalls on the broker's own rules (docs/design.md, "Kafka topics"): records that fit
the topic's ``max.message.bytes``, topics checked before anything is consumed, a topic deleted
while running. On the shared broker and on a broker that does not create topics on first use
(``auto.create.topics.enable=false``, as most production clusters)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citemon.core.errors import TopicsUnusable
from citemon_instrumentation import record_answer
from tests.integration.conftest import StrictBroker, TopicFactory
from tests.integration.monitor_support import (
    metric_sum,
    publish,
    read_topic,
    run_monitor,
    settings_for,
    start_process,
    wait_for,
)
from tests.integration.prometheus_support import free_port

PASSAGE = ("p-1", "The record states every numbered fact that the answer lists.")


def _answers(n: int, sentences: int) -> list[tuple[bytes, bytes]]:
    """``n`` answers through the real shim, the first of ``sentences`` short cited sentences
    and the rest of two; each as (key = trace ID, OTLP protobuf value)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "big", "service.version": "1"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    out: list[tuple[bytes, bytes]] = []
    for i in range(n):
        count = sentences if i == 0 else 2
        answer = " ".join(f"Fact {k} is in the record [p-1]." for k in range(count))
        record_answer(question=f"q{i}", answer=answer, passages=[PASSAGE], tracer_provider=provider)
        (span,) = exporter.get_finished_spans()
        exporter.clear()
        assert span.context is not None
        out.append(
            (f"{span.context.trace_id:032x}".encode(), encode_spans([span]).SerializeToString())
        )
    return out


async def _produce(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=4_000_000)
    await producer.start()
    try:
        for key, value in messages:
            await producer.send_and_wait(topic, value, key=key, partition=0)
    finally:
        await producer.stop()


async def test_an_answer_too_large_for_its_results_topic_is_cut_counted_once_and_nothing_stalls(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    limit = 20_000
    topic = await kafka_topic(partitions=1)
    results = await kafka_topic(partitions=1, configs={"max.message.bytes": str(limit)})
    messages = _answers(6, sentences=1500)  # the first: 1,500 claims, ~50 KB of answer
    await _produce(kafka_bootstrap, topic, messages)
    settings = settings_for(kafka_bootstrap, topic, results_topic=results)
    async with run_monitor(settings) as mon:
        await asyncio.wait_for(mon.pipeline.caught_up(), 120)
        assert metric_sum(mon.registry, "citemon_answers_total") == 6
        assert metric_sum(mon.registry, "citemon_claims_total") == 1500 + 5 * 2
        reg = mon.registry
        assert metric_sum(reg, "citemon_records_cut_total", record="results", reason="claims") == 1
        assert (
            metric_sum(reg, "citemon_records_cut_total", record="results", reason="excerpts") == 1
        )
        assert metric_sum(reg, "citemon_records_cut_total") == 2
        assert mon.pipeline.stats.commit_failures == 0
    records = await read_topic(kafka_bootstrap, results)
    assert len(records) == 6
    bodies = [json.loads(r.value) for r in records]
    big, *small = bodies
    assert all(len(r.value) + len(r.key) < limit for r in records)
    cut = big["cut"]
    assert cut["excerpts"] == 1 and big["excerpts"] == {}
    assert 0 < len(big["claims"]) < 1500 and cut["claims"] == 1500 - len(big["claims"])
    assert sum(cut["verdicts"].values()) == cut["claims"]
    assert cut["max_bytes"] <= limit and cut["bytes"] > limit
    assert all("cut" not in b and len(b["claims"]) == 2 and b["excerpts"] for b in small)


# -- a broker that does not create topics ---------------------------------------------------


async def _create(bootstrap: str, *names: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    finally:
        await admin.close()


async def _partitions(bootstrap: str, names: list[str]) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        topics = await admin.describe_topics(names)
    finally:
        await admin.close()
    return {t["topic"]: len(t["partitions"]) for t in topics if t["error_code"] == 0}


def _names(tmp_path: Path) -> tuple[str, str, str, str]:
    base = f"strict.{tmp_path.name}"
    return base, f"{base}.dlq", f"{base}.results", f"{base}.review"


async def test_missing_topics_exit_1_naming_each_and_what_fixes_it(
    kafka_strict: StrictBroker, tmp_path: Path
) -> None:
    topic, dlq, results, review = _names(tmp_path)
    await _create(kafka_strict.bootstrap, topic)
    log = tmp_path / "run.log"
    flags = [
        "--bootstrap-servers", kafka_strict.bootstrap, "--topic", topic, "--dlq-topic", dlq,
        "--results-topic", results, "--review-rate", "0.5", "--review-topic", review,
        "--metrics-host", "127.0.0.1", "--metrics-port", str(free_port()),
    ]  # fmt: skip
    proc = start_process(flags, log_path=log)
    assert await asyncio.to_thread(proc.wait, 60) == 1
    text = log.read_text()
    for name in (dlq, results, review):
        assert f"topic {name!r}" in text and "does not exist" in text, text[-3000:]
    assert f"topic {topic!r}" not in text  # the one that exists is not named
    assert text.count("--create-topics") >= 3
    assert "not found in cluster metadata" not in text  # exits before any client loops
    assert "Traceback" not in text
    assert await _partitions(kafka_strict.bootstrap, [dlq, results, review]) == {}


async def test_create_topics_creates_what_is_missing_and_every_answer_is_counted(
    kafka_strict: StrictBroker, tmp_path: Path
) -> None:
    topic, dlq, results, review = _names(tmp_path)
    await _create(kafka_strict.bootstrap, topic, partitions=2)
    sent = await asyncio.to_thread(publish, kafka_strict.bootstrap, topic, [("v1", 20, False)])
    settings = settings_for(
        kafka_strict.bootstrap,
        topic,
        dlq_topic=dlq,
        results_topic=results,
        review_rate=1.0,
        review_topic=review,
        create_topics=True,
        topic_partitions=2,
        topic_replication_factor=1,
    )
    async with run_monitor(settings) as mon:
        await asyncio.wait_for(mon.pipeline.caught_up(), 90)
        assert metric_sum(mon.registry, "citemon_answers_total") == len(sent) == 20
    assert await _partitions(kafka_strict.bootstrap, [dlq, results, review]) == {
        dlq: 2,
        results: 2,
        review: 2,
    }
    assert len(await read_topic(kafka_strict.bootstrap, results)) == 20
    assert len(await read_topic(kafka_strict.bootstrap, review)) == 20


async def test_a_topic_deleted_while_running_turns_health_red_and_stops_the_monitor(
    kafka_strict: StrictBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic, dlq, results, _ = _names(tmp_path)
    await _create(kafka_strict.bootstrap, topic, dlq, results)
    await asyncio.to_thread(publish, kafka_strict.bootstrap, topic, [("v1", 5, False)])
    settings = settings_for(kafka_strict.bootstrap, topic, dlq_topic=dlq, results_topic=results)
    with pytest.raises(TopicsUnusable, match="is gone while running"):
        async with run_monitor(settings) as mon:
            await asyncio.wait_for(mon.pipeline.caught_up(), 60)
            port = mon.server.port
            healthy = await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/healthz")
            assert healthy.status_code == 200
            admin = AIOKafkaAdminClient(bootstrap_servers=kafka_strict.bootstrap)
            await admin.start()
            try:
                await admin.delete_topics([results])
            finally:
                await admin.close()
            await wait_for(lambda: not mon.pipeline.live, 30, "the monitor to see the topic gone")
            reply = await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/healthz")
            assert reply.status_code == 503
    gone = [r for r in caplog.records if "is gone while running" in r.getMessage()]
    assert len(gone) == 1 and results in gone[0].getMessage()
