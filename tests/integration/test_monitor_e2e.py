"""``citemon run`` end to end on the real broker, in this process: exact counts, poison, replicas.

Ground truth: the fake RAG service's answers scored offline by the same (lexical) judge. The
monitor must count exactly those verdicts per version — not approximately — having read them
from Kafka as OTLP protobuf written by the real shim and ``KafkaSpanExporter``.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

from aiokafka import AIOKafkaProducer
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    expected_verdicts,
    metric_sum,
    publish,
    read_topic,
    run_monitor,
    settings_for,
    verdicts_by_version,
    wait_for,
)

PLAN = [("v1", 90, False), ("v2", 45, True)]
N = sum(n for _, n, _ in PLAN)


async def test_every_answer_scored_once_with_exact_verdicts_and_results(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=3)
    results = await kafka_topic(partitions=1)
    sent = await asyncio.to_thread(publish, kafka_bootstrap, topic, PLAN, seed=1)
    expected = await expected_verdicts(sent)
    settings = settings_for(kafka_bootstrap, topic, results_topic=results)
    async with run_monitor(settings) as mon:
        # Every record up to the log end committed, hence counted: a duplicate would be too.
        await asyncio.wait_for(mon.pipeline.caught_up(), 60)
        assert metric_sum(mon.registry, "citemon_answers_total") == N
        assert metric_sum(mon.registry, "citemon_spans_total", outcome="answer") == N
        assert verdicts_by_version(mon.registry) == expected
        # The deploy is visible: v1 mostly correct, v2 mostly misattributed.
        assert expected["v1"]["correct"] > 0.8 * sum(expected["v1"].values())
        assert expected["v2"]["misattributed"] > 0.5 * sum(expected["v2"].values())
        assert mon.pipeline.ready
    records = await read_topic(kafka_bootstrap, results)
    bodies = [json.loads(r.value) for r in records]
    assert len(bodies) == N
    assert len({(b["trace_id"], b["span_id"]) for b in bodies}) == N
    per_version: dict[str, Counter[str]] = {}
    for b in bodies:
        per_version.setdefault(b["version"], Counter()).update(c["verdict"] for c in b["claims"])
    assert per_version == expected
    assert {r.key.decode() for r in records} == {b["trace_id"] for b in bodies}


async def test_poison_is_dead_lettered_and_counted_while_good_traffic_flows(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=2)
    settings = settings_for(kafka_bootstrap, topic)
    logs = ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(scope_logs=[ScopeLogs(log_records=[LogRecord(time_unix_nano=1)])])
        ]
    ).SerializeToString()
    poison = [
        (b"k1", b"\x08\x96\x01 definitely not OTLP \xff\xfe"),
        (b"k2", b'{"resourceSpans": "not a list"}'),
        (b"k3", logs),
        (b"k4", b"{not json"),
    ]
    async with run_monitor(settings) as mon:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            for key, value in poison:
                await producer.send_and_wait(topic, value, key=key)
        finally:
            await producer.stop()
        sent = await asyncio.to_thread(publish, kafka_bootstrap, topic, [("v1", 40, False)])
        await wait_for(
            lambda: (
                metric_sum(mon.registry, "citemon_answers_total") >= len(sent)
                and metric_sum(mon.registry, "citemon_dead_letters_total") >= len(poison)
            ),
            30,
            "answers and dead letters",
        )
        assert metric_sum(mon.registry, "citemon_answers_total") == len(sent)
        assert metric_sum(mon.registry, "citemon_dead_letters_total") == len(poison)
        assert metric_sum(mon.registry, "citemon_spans_total", outcome="invalid") == len(poison)
        reasons = {
            s.labels["reason"]: s.value
            for m in mon.registry.collect()
            for s in m.samples
            if s.name == "citemon_dead_letters_total"
        }
        assert reasons.get("wrong_message", 0) >= 1 and reasons.get("not_json", 0) >= 1
    dead = await read_topic(kafka_bootstrap, settings.dlq_topic, committed_only=False)
    assert sorted((r.key, r.value) for r in dead) == sorted(poison)  # original key and value
    for r in dead:
        headers = dict(r.headers)
        assert headers["citemon.error"].decode() in reasons
        assert headers["citemon.source"].decode().startswith(f"{topic}/")


async def test_two_replicas_split_partitions_and_their_counters_add_up(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=4)
    settings = settings_for(kafka_bootstrap, topic, group=f"pair.{topic}")
    async with run_monitor(settings) as first, run_monitor(settings) as second:
        await wait_for(
            lambda: (
                first.pipeline.ready
                and second.pipeline.ready
                and len(first.pipeline.assigned) + len(second.pipeline.assigned) == 4
            ),
            30,
            "both replicas to own partitions",
        )
        assert not first.pipeline.assigned & second.pipeline.assigned
        sent = await asyncio.to_thread(publish, kafka_bootstrap, topic, PLAN, seed=2)
        expected = await expected_verdicts(sent)

        def total() -> float:
            return sum(metric_sum(m.registry, "citemon_answers_total") for m in (first, second))

        await asyncio.wait_for(
            asyncio.gather(first.pipeline.caught_up(), second.pipeline.caught_up()), 60
        )
        assert total() == N
        a = metric_sum(first.registry, "citemon_answers_total")
        b = metric_sum(second.registry, "citemon_answers_total")
        assert a > 0 and b > 0, (a, b)
        assert verdicts_by_version(first.registry, second.registry) == expected


async def test_a_second_caught_up_waits_for_what_was_written_since_the_first(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    await asyncio.to_thread(publish, kafka_bootstrap, topic, [("v1", 10, False)], seed=3)
    settings = settings_for(kafka_bootstrap, topic)
    async with run_monitor(settings) as mon:
        first = await asyncio.wait_for(mon.pipeline.caught_up(), 60)
        assert list(first.values()) == [10]
        assert metric_sum(mon.registry, "citemon_answers_total") == 10
        await asyncio.to_thread(publish, kafka_bootstrap, topic, [("v1", 15, False)], seed=4)
        second = await asyncio.wait_for(mon.pipeline.caught_up(), 60)
        assert list(second.values()) == [25]
        assert metric_sum(mon.registry, "citemon_answers_total") == 25
