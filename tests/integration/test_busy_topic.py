"""A busy spans topic on the real broker (docs/design.md, "Far-apart parts and busy topics"):
RAG traces whose retriever span and root arrive far apart, among other telemetry, are each
assembled and counted once; the other traces cost a bare root's entry and are counted once, as
``unrecognized``; every span read is counted under one outcome.

The normal suite runs a small version (the gap between a trace's parts far past intake's bound
on uncommitted records, as in production); the slow suite runs the issue's scenario: 1,000 RAG
traces among 19,000 others on 4 partitions, parts 2,000 and 12,000 messages apart, with a second
replica joining and the first killed (``kill -9``) during it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from citemon._service.ledger import Entry, Ready
from citemon._service.outputs import Commit, KafkaDelivery, OutMessage
from citemon._service.pipeline import commit_messages
from tests.integration.busy_topic import interleave, other_traces, produce, rag_traces
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    committed_total,
    metric_sum,
    read_topic,
    ready,
    run_monitor,
    scored_at_exit,
    scrape,
    settings_for,
    start_process,
    wait_for,
)
from tests.integration.prometheus_support import free_port
from tests.kafka_faults import FaultyClients, InjectedFault

JUDGE = ("--judge", "tests.integration.busy_topic:specimen_judge")


def _result_keys(records: list[Any]) -> Counter[tuple[str, str]]:
    bodies = [json.loads(r.value) for r in records]
    return Counter((b["trace_id"], b["span_id"]) for b in bodies)


async def _held_state(bootstrap: str, topic: str, partitions: int) -> dict[bytes, bytes | None]:
    """The held-parts topic as its compaction will leave it: each key's last value."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    state: dict[bytes, bytes | None] = {}
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        left = set(tps)
        while left:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for rec in records:
                    state[rec.key] = rec.value
            left = {tp for tp in left if await consumer.position(tp) < ends[tp]}
    finally:
        await consumer.stop()
    return state


async def test_split_traces_far_apart_among_other_telemetry_are_counted_once(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    n_rag, n_other, gap, partitions = 40, 760, 300, 4
    topic = await kafka_topic(partitions=partitions)
    results = await kafka_topic(partitions=1)
    messages = interleave(rag_traces(n_rag), other_traces(n_other), gap)
    messages += other_traces(10, roots=False)  # 20 spans, none of use and no root among them
    await produce(kafka_bootstrap, topic, messages)
    # Each root lies about 75 records after its retriever on its partition, far past the 16
    # records intake may hold uncommitted: before the held-parts store, the retriever's record
    # held its partition's commit, intake paused, and the root was never read.
    settings = settings_for(
        kafka_bootstrap, topic, JUDGE, results_topic=results, max_uncommitted_records=16
    )
    async with run_monitor(settings) as mon:
        await asyncio.wait_for(mon.pipeline.caught_up(), 60)
        reg, assembler = mon.registry, mon.pipeline.assembler
        assert metric_sum(reg, "citemon_answers_total") == n_rag
        assert metric_sum(reg, "citemon_claims_total", verdict="misattributed") == 2 * n_rag
        assert metric_sum(reg, "citemon_claims_total", verdict="correct") == n_rag
        assert metric_sum(reg, "citemon_claims_total") == 3 * n_rag
        assert metric_sum(reg, "citemon_traces_total", outcome="completed") == n_rag
        for outcome in ("settled", "evicted", "dropped_incomplete", "superseded"):
            assert metric_sum(reg, "citemon_traces_total", outcome=outcome) == 0, outcome
        # The other traces: a bare root each, held as its trace ID until its window ends.
        assert assembler.roots + assembler.unrecognized == n_other
        assert len(assembler) == 0 and assembler.restored == 0
        # Every span read, under one outcome: 2 parts per RAG trace, 3 skipped per other one.
        assert metric_sum(reg, "citemon_spans_total", outcome="part") == 2 * n_rag
        assert metric_sum(reg, "citemon_spans_total", outcome="skipped") == 3 * n_other + 20
        assert metric_sum(reg, "citemon_spans_total", outcome="answer") == 0
        assert metric_sum(reg, "citemon_held_traces") == 0
        assert metric_sum(reg, "citemon_dead_letters_total") == 0
        held_topic = mon.pipeline.settings.held_topic_name
    keys = _result_keys(await read_topic(kafka_bootstrap, results))
    assert len(keys) == n_rag and set(keys.values()) == {1}
    # Each RAG trace was held once (its retriever) and let go (its tombstone, with its answer).
    state = await _held_state(kafka_bootstrap, held_topic, partitions)
    assert len(state) == n_rag and set(state.values()) == {None}


async def test_traces_settled_by_their_window_after_a_restart_are_counted_once(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    """Parts held in the store by one process are read back by the next, which settles them
    when their window (begun in the first) ends: each answer once, in the metrics and results."""
    from tests.integration.test_monitor_rebalance import rootless_traces

    topic = await kafka_topic(partitions=3)
    results = await kafka_topic(partitions=1)
    settings = settings_for(kafka_bootstrap, topic, results_topic=results, trace_window_s=6.0)
    sent = rootless_traces(30)
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    await produce(
        kafka_bootstrap, topic, [(k, encode_spans(s).SerializeToString()) for k, s in sent]
    )
    async with run_monitor(settings) as first:
        await wait_for(
            lambda: len(first.pipeline.assembler) == 30 and not first.pipeline.offsets,
            30,
            "the first process to hold every trace, with every record committed",
        )
        assert metric_sum(first.registry, "citemon_answers_total") == 0
        assert metric_sum(first.registry, "citemon_held_traces") == 30
    async with run_monitor(settings) as second:
        await asyncio.wait_for(second.pipeline.caught_up(), 60)
        assert second.pipeline.assembler.restored == 30
        assert metric_sum(second.registry, "citemon_answers_total") == 30
        assert metric_sum(second.registry, "citemon_traces_total", outcome="settled") == 30
    keys = _result_keys(await read_topic(kafka_bootstrap, results))
    assert len(keys) == 30 and set(keys.values()) == {1}


# -- the scenario, on replicas killed and joining (slow suite) ----------------------------

ENV = {"CITEMON_SESSION_TIMEOUT_MS": "6000", "CITEMON_TEST_JUDGE_DELAY_S": "0.03"}


def _flags(bootstrap: str, topic: str, port: int, results: str) -> list[str]:
    return [
        "--bootstrap-servers", bootstrap, "--topic", topic, "--group", f"g.{topic}",
        "--dlq-topic", f"{topic}.dlq", "--metrics-port", str(port), "--metrics-host",
        "127.0.0.1", "--commit-interval", "0.2", "--budget-per-minute", "0",
        "--results-topic", results, "--max-inflight-answers", "8", *JUDGE,
    ]  # fmt: skip


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("gap", [2000, 12000])
async def test_the_busy_topic_through_a_rebalance_and_a_kill_9_counts_every_answer_once(
    kafka_bootstrap: str, kafka_topic: TopicFactory, tmp_path: Path, gap: int
) -> None:
    n_rag, n_other, partitions = 1000, 19000, 4
    topic = await kafka_topic(partitions=partitions)
    results = await kafka_topic(partitions=1)
    messages = interleave(rag_traces(n_rag), other_traces(n_other), gap)
    await produce(kafka_bootstrap, topic, messages)
    port_a, port_b = free_port(), free_port()
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    a = start_process(_flags(kafka_bootstrap, topic, port_a, results), env=ENV, log_path=log_a)
    b: Any = None
    last_a = 0.0
    try:
        await wait_for(lambda: ready(port_a), 60, "replica A to be ready")
        await wait_for(
            lambda: (scrape(port_a, 0.5) or {}).get("citemon_answers_total", 0) >= 100,
            120,
            "replica A to count 100 answers",
        )
        b = start_process(_flags(kafka_bootstrap, topic, port_b, results), env=ENV, log_path=log_b)
        await wait_for(lambda: ready(port_b), 60, "replica B to join (a rebalance)")
        await wait_for(
            lambda: (scrape(port_b, 0.5) or {}).get("citemon_answers_total", 0) >= 20,
            120,
            "replica B to count answers",
        )
        last_a = ((await asyncio.to_thread(scrape, port_a, 0.5)) or {}).get(
            "citemon_answers_total", 0.0
        )
        a.send_signal(signal.SIGKILL)  # mid-stream, with parts held and answers in flight
        a.wait(10)
        deadline = time.monotonic() + 300
        while True:
            keys = _result_keys(await read_topic(kafka_bootstrap, results))
            sums = (await asyncio.to_thread(scrape, port_b, 0.5)) or {}
            committed = await committed_total(kafka_bootstrap, f"g.{topic}", topic, partitions)
            if (
                len(keys) >= n_rag
                and committed >= len(messages)
                and sums.get("citemon_held_traces", 1) == 0
            ):
                break
            assert time.monotonic() < deadline, f"{len(keys)} of {n_rag} answers in time"
            await asyncio.sleep(1.0)
        b.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(b.wait, 60) == 0
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
    keys = _result_keys(await read_topic(kafka_bootstrap, results))
    text_b = log_b.read_text()
    print(
        f"\nbusy topic, parts {gap} messages apart: A counted {last_a:.0f} before its kill -9 "
        f"(last scrape); results {sum(keys.values())} for {len(keys)} answers; B's exit line: "
        + next((ln for ln in text_b.splitlines() if "citemon run:" in ln), "?")
    )
    assert len(keys) == n_rag and set(keys.values()) == {1}
    # B counted what A had not committed; A's last scrape can only lag what it committed.
    scored_b = scored_at_exit(text_b)
    assert last_a > 0 and scored_b > 0 and last_a + scored_b <= n_rag
    for record in await read_topic(kafka_bootstrap, results):
        body = json.loads(record.value)
        assert [c["verdict"] for c in body["claims"]] == [
            "correct",
            "misattributed",
            "misattributed",
        ]


async def test_the_held_topic_is_created_compacted_and_an_uncompacted_one_is_refused(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from citemon._core.errors import TopicsUnusable
    from citemon._service.kafka import check_topics

    topic = await kafka_topic(partitions=5)
    settings = settings_for(kafka_bootstrap, topic)
    await check_topics(settings)  # missing: created, compacted, one partition per input's
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        held = settings.held_topic_name
        (described,) = await admin.describe_topics([held])
        resource = ConfigResource(ConfigResourceType.TOPIC, held, configs={"cleanup.policy": None})
        (response,) = await admin.describe_configs([resource])
        (entry,) = response.to_object()["resources"][0]["config_entries"]
        await admin.delete_topics([held])
    finally:
        await admin.close()
    assert len(described["partitions"]) == 5 and entry["config_value"] == "compact"
    plain = await kafka_topic(partitions=5)  # cleanup.policy=delete, the broker's default
    with pytest.raises(TopicsUnusable) as refused:
        await check_topics(settings_for(kafka_bootstrap, topic, held_topic=plain))
    assert f"topic {plain!r} (held trace parts, --held-topic) has cleanup.policy=delete" in str(
        refused.value
    )
    few = await kafka_topic(partitions=2, configs={"cleanup.policy": "compact"})
    with pytest.raises(TopicsUnusable, match="has 2 partitions, fewer than the input"):
        await check_topics(settings_for(kafka_bootstrap, topic, held_topic=few))


async def produce_held(bootstrap: str, topic: str, key: bytes, value: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key, partition=0)
    finally:
        await producer.stop()


async def test_at_least_once_a_tombstone_is_written_only_once_its_commit_is_confirmed(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    """Without transactions a tombstone acknowledged before its commit, then a crash, would
    leave the completing record to be read again with its trace's parts gone (an answer never
    counted). The commit fails here (as a ``kill -9`` before it would): the parts stay held and
    the dead letter is out; once a commit goes through, its tombstone follows."""
    topic, held = await kafka_topic(partitions=1), await kafka_topic(partitions=1)
    settings = settings_for(kafka_bootstrap, topic, held_topic=held)
    assert not settings.transactional
    tp, key = TopicPartition(topic, 0), b"a" * 32
    clients = FaultyClients(fail_commit=True)  # the first commit raises InjectedFault
    consumer = clients.consumer(
        **settings.kafka_options(), group_id=settings.group, enable_auto_commit=False
    )
    await consumer.start()
    consumer.assign([tp])
    delivery = KafkaDelivery(settings, consumer, clients)
    await delivery.start()

    async def last_values() -> dict[bytes, bytes | None]:
        return {r.key: r.value for r in await read_topic(kafka_bootstrap, held)}

    async def deliver(offset: int, *held_changes: OutMessage, dead: bool = False) -> Any:
        entries = [Entry(tp, offset - 1, held=list(held_changes))]
        if dead:
            entries[0].messages.append(OutMessage(settings.dlq_topic, key, b"bad"))
        r = Ready(tp, offset, entries)
        return await delivery.deliver([Commit(tp, offset, commit_messages(r, settings))])

    tombstone = OutMessage(held, key, None, partition=0)
    try:
        # The trace's parts, held with an earlier commit.
        await produce_held(kafka_bootstrap, held, key, b"parts")
        assert await last_values() == {key: b"parts"}
        with pytest.raises(InjectedFault):
            await deliver(8, tombstone, dead=True)
        # The commit never happened: the parts are still held, the dead letter is out.
        assert await last_values() == {key: b"parts"}
        assert [r.value for r in await read_topic(kafka_bootstrap, settings.dlq_topic)] == [b"bad"]
        assert await consumer.committed(tp) is None
        assert await deliver(8, tombstone) == {tp: None}
        assert await consumer.committed(tp) == 8
        assert await last_values() == {key: None}
        # A tombstone then an upsert of the same key in one commit: the upsert's parts stay.
        later = OutMessage(held, key, b"later parts", partition=0)
        assert await deliver(10, tombstone, later) == {tp: None}
        assert await last_values() == {key: b"later parts"}
    finally:
        await delivery.stop()
        await consumer.stop()
