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
from collections import Counter
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.integration.busy_topic import interleave, other_traces, produce, rag_traces
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    metric_sum,
    read_topic,
    run_monitor,
    settings_for,
    wait_for,
)

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
        assert metric_sum(reg, "citemon_spans_total", outcome="skipped") == 3 * n_other
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
