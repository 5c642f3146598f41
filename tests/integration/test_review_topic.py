"""The review sample (``citemon run --review-rate``): exactly the sampled answers, each once.

Review records are produced in the per-partition transaction that commits the input offsets
with the results, so a ``read_committed`` reader sees each sampled trace exactly once, across
a ``kill -9`` of the monitor mid-stream, and exactly the set the review hash picks among the
answers ``--sample-rate`` keeps (the two choices are independent hashes of the trace ID).
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
from aiokafka import AIOKafkaProducer

from citemon._commands._results import ResultsReader, Start
from citemon._review.model import ReviewRecord, read_review_records
from citemon._review.sample import review_selected
from citemon._service.answers import ratio_bound, trace_id_sampled
from citemon._service.settings import Settings
from citemon.cli import main
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    committed_total,
    metric_sum,
    publish,
    read_topic,
    ready,
    run_monitor,
    settings_for,
    start_process,
    wait_for,
)
from tests.integration.prometheus_support import free_port

ENV = {"CITEMON_SESSION_TIMEOUT_MS": "6000", "CITEMON_TEST_JUDGE_DELAY_S": "0.05"}
REVIEW_RATE = 0.3
SAMPLE_RATE = 0.8


async def _review_records(bootstrap: str, topic: str) -> list[tuple[bytes, ReviewRecord]]:
    """Every committed record of the review topic, up to its last stable offset."""
    out: list[tuple[bytes, ReviewRecord]] = []
    async with ResultsReader(Settings(bootstrap_servers=bootstrap), topic) as reader:
        await reader.seek(Start("offset", 0))
        async for batch in reader.batches(asyncio.Event()):
            out += [(r.key, ReviewRecord.model_validate_json(r.value)) for r in batch]
    return out


async def test_review_topic_holds_each_sampled_trace_once_across_a_kill_9(
    kafka_bootstrap: str,
    kafka_topic: TopicFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = await kafka_topic(partitions=3)
    review = await kafka_topic(partitions=2)
    results = await kafka_topic(partitions=1)
    sent = await asyncio.to_thread(
        publish, kafka_bootstrap, topic, [("v1", 90, False), ("v2", 60, True)], seed=18
    )
    n = len(sent)
    group = f"g.{topic}"
    port = free_port()
    flags = [
        "--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--group", group,
        "--dlq-topic", f"{topic}.dlq", "--metrics-port", str(port),
        "--metrics-host", "127.0.0.1", "--commit-interval", "0.2", "--budget-per-minute", "0",
        "--judge", "tests.integration.slow_judge:factory", "--max-inflight-answers", "8",
        "--sample-rate", str(SAMPLE_RATE), "--review-rate", str(REVIEW_RATE),
        "--review-topic", review, "--results-topic", results,
        "--review-passage-chars", "60",
    ]  # fmt: skip
    log = tmp_path / "run.log"
    proc = start_process(flags, env=ENV, log_path=log)
    try:
        await wait_for(lambda: ready(port), 30, "the monitor to be ready")
        # Kill once some answers have committed, well before the end.
        deadline = time.monotonic() + 30
        while await committed_total(kafka_bootstrap, group, topic, 3) == 0:
            assert time.monotonic() < deadline, "nothing was committed"
            await asyncio.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    done_before = await committed_total(kafka_bootstrap, group, topic, 3)
    final = start_process(flags, env=ENV, log_path=log)
    try:
        await wait_for(lambda: ready(port), 30, "the last monitor to be ready")
        deadline = time.monotonic() + 60
        while await committed_total(kafka_bootstrap, group, topic, 3) < n:
            assert time.monotonic() < deadline, "not every answer was committed"
            await asyncio.sleep(0.3)
    finally:
        final.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(final.wait, 30) == 0
    assert 0 < done_before < n, "the kill did not land mid-stream; the test proved nothing"

    # The results topic names every scored answer's trace (exactly once: the existing
    # guarantee); the review topic must hold exactly those the review hash picks among them.
    scored = [json.loads(r.value)["trace_id"] for r in await read_topic(kafka_bootstrap, results)]
    assert len(scored) == len(set(scored))
    bound = ratio_bound(SAMPLE_RATE)
    assert all(trace_id_sampled(t, bound) for t in scored)
    assert 0.7 * n < len(scored) < 0.9 * n
    expected = {t for t in scored if review_selected(t, REVIEW_RATE)}
    assert 0.2 * len(scored) < len(expected) < 0.4 * len(scored)

    got = await _review_records(kafka_bootstrap, review)
    traces = Counter(record.trace_id for _, record in got)
    assert max(traces.values()) == 1, "a sampled trace was written twice"
    assert set(traces) == expected
    by_text = {(r.question, r.answer): r for r in sent}
    for key, record in got:
        assert key == record.trace_id.encode()
        source = by_text[(record.question, record.answer)]
        assert record.version == source.version and record.service == source.service
        assert record.claims and record.scored_at
        full = source.passage_map()
        cited = {pid for c in record.claims for pid in (*c.cited_ids, *c.supported_by)}
        assert set(record.passages) == cited & set(full)
        for pid, text in record.passages.items():
            if len(full[pid]) > 60:
                assert pid in record.passages_cut and len(text) <= 60
                assert full[pid].startswith(text[:-1].rstrip())
            else:
                assert pid not in record.passages_cut and text == full[pid]
    assert any(record.passages_cut for _, record in got), "no passage was long enough to cut"

    # `citemon review pull` reads the same committed records: all of them, or a seeded set.
    pulled = tmp_path / "set.jsonl"
    base = ["review", "pull", "--bootstrap-servers", kafka_bootstrap, "--review-topic", review]
    assert await asyncio.to_thread(main, [*base, "--size", "0", "-o", str(pulled)]) == 0
    assert sorted(r.trace_id for r in read_review_records(pulled)) == sorted(expected)
    five: list[list[str]] = []
    for _ in range(2):
        assert (
            await asyncio.to_thread(main, [*base, "--seed", "1", "--size", "5", "-o", str(pulled)])
            == 0
        )
        five.append([r.trace_id for r in read_review_records(pulled)])
    assert five[0] == five[1] and len(set(five[0])) == 5 and set(five[0]) <= expected
    capsys.readouterr()
    gone = [*base, "--review-topic", "no.such.topic", "-o", "-"]
    assert await asyncio.to_thread(main, gone) == 2
    assert "review topic 'no.such.topic' does not exist" in capsys.readouterr().err


def _otlp_json_span(span: dict[str, Any]) -> bytes:
    attrs = [{"key": k, "value": {"stringValue": v}} for k, v in span.pop("attrs").items()]
    resource = [{"key": "service.name", "value": {"stringValue": "bot"}}]
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": resource},
                "scopeSpans": [{"spans": [{**span, "attributes": attrs}]}],
            }
        ]
    }
    return json.dumps(body, ensure_ascii=False).encode()


def _trace(trace_id: str, question: str, passage: str) -> list[bytes]:
    """An OpenInference trace in two Kafka records, each under 1 MB: the retriever's 32
    passages, then the root CHAIN span with the question and the answer citing each."""
    root, retriever = "1" * 16, "2" * 16
    docs = {}
    for i in range(32):
        docs[f"retrieval.documents.{i}.document.id"] = f"d{i}"
        docs[f"retrieval.documents.{i}.document.content"] = f"Fact {i} is so. {passage}"
    answer = " ".join(f"Fact {i} is so [d{i}]." for i in range(32))
    times = {"startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    return [
        _otlp_json_span(
            {
                "traceId": trace_id, "spanId": retriever, "parentSpanId": root,
                "name": "retrieve", **times,
                "attrs": {"openinference.span.kind": "RETRIEVER", **docs},
            }
        ),
        _otlp_json_span(
            {
                "traceId": trace_id, "spanId": root, "name": "chain", **times,
                "attrs": {
                    "openinference.span.kind": "CHAIN",
                    "input.value": question,
                    "output.value": answer,
                },
            }
        ),
    ]  # fmt: skip


async def test_a_review_record_over_kafkas_message_limit_does_not_stall_its_partition(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    """A sampled trace whose review record would be over 1 MB (a 700 KB question, 32 passages
    of 4000 four-byte characters; each of its Kafka records under 1 MB) is scored and counted
    without a review record; the trace after it on the same partition gets its record."""
    topic = await kafka_topic(partitions=1)
    review = await kafka_topic(partitions=1)
    big, small = "a" * 32, "b" * 32
    values = [
        *_trace(big, "q" * 700_000, "\U0001f600" * 4000),
        *_trace(small, "What holds?", "short"),
    ]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=1_048_576)
    await producer.start()
    try:
        for value in values:
            assert len(value) < 1_000_000
            await producer.send_and_wait(topic, value)
    finally:
        await producer.stop()
    settings = settings_for(
        kafka_bootstrap, topic, review_rate=1.0, review_topic=review, trace_window_s=60.0
    )
    async with run_monitor(settings) as mon:
        await asyncio.wait_for(mon.pipeline.caught_up(), 60)
        assert metric_sum(mon.registry, "citemon_answers_total") == 2
    got = await _review_records(kafka_bootstrap, review)
    assert [record.trace_id for _, record in got] == [small]
