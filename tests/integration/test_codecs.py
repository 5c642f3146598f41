"""Every Kafka compression codec is read, and a batch that cannot be decoded is skipped precisely.

The producer here is aiokafka's own (``compression_type=…``), one record batch per codec, and
the topic is read back raw to prove each batch really carries its codec. The Collector's
``compression:`` setting is covered in test_collector_path.py.

The undecodable batch is real: an lz4 batch the broker accepted, read by a ``citemon run``
process whose aiokafka is told lz4's library is missing (``tests/kafka_faults.py``). A
hand-made bad batch cannot be had: Kafka 4.1.1 refuses each on produce (checked with raw
``Produce`` requests): a bad CRC with ``CORRUPT_MESSAGE`` (2), a corrupt lz4 payload under a
valid CRC and an unknown codec ID (5) with ``UNKNOWN_SERVER_ERROR`` (-1). Those cases are
covered by tests/unit/test_batches.py.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.record.memory_records import MemoryRecords
from prometheus_client.parser import text_string_to_metric_families

from citemon._core.records import AnswerRecord
from citemon._demo.data import QUESTIONS, answer
from citemon._demo.service import V1_FAULTS, otlp_template, with_trace_id
from citemon._service.kafka import CODECS
from tests.integration.collector_support import batch_codecs
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    expected_verdicts,
    metric_sum,
    read_topic,
    ready,
    run_monitor,
    scored_at_exit,
    scrape,
    settings_for,
    start_process,
    verdicts_by_version,
    wait_for,
)
from tests.integration.prometheus_support import free_port

SERVICE = "codec-bot"
PARTITIONS = 6
Message = tuple[bytes, bytes]


def answers(version: str, n: int, rng: random.Random) -> tuple[list[AnswerRecord], list[Message]]:
    """``n`` answers of ``version`` and their OTLP messages (key = trace ID hex)."""
    records: list[AnswerRecord] = []
    messages: list[Message] = []
    for i in range(n):
        fault = rng.choice([name for name, _ in V1_FAULTS])
        record = answer(
            rng.choice(QUESTIONS),
            fault,
            f"{version}-{i}",
            service=SERVICE,
            version=version,
            environment="bench",
        )
        records.append(record)
        messages.append(
            with_trace_id(
                otlp_template(record, version=version, service=SERVICE), rng.getrandbits(128)
            )
        )
    return records, messages


async def send_batch(
    bootstrap: str, topic: str, partition: int, codec: str, messages: list[Message]
) -> None:
    """``messages`` as exactly one record batch compressed with ``codec``."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec
    )
    await producer.start()
    try:
        batch = producer.create_batch()
        for key, value in messages:
            assert batch.append(key=key, value=value, timestamp=None) is not None, "batch full"
        batch.close()
        await (await producer.send_batch(batch, topic, partition=partition))
    finally:
        await producer.stop()


async def test_every_codec_from_our_producer_is_consumed_and_scored_exactly(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    rng = random.Random(10)
    sent: list[AnswerRecord] = []
    for codec in CODECS:
        records, messages = answers(f"v-{codec}", 5, rng)
        sent += records
        await send_batch(kafka_bootstrap, topic, 0, codec, messages)
    assert await batch_codecs(kafka_bootstrap, TopicPartition(topic, 0)) == [
        (5 * i, 5, codec) for i, codec in enumerate(CODECS)
    ]
    expected = await expected_verdicts(sent)
    settings = settings_for(kafka_bootstrap, topic)
    async with run_monitor(settings) as m:
        await wait_for(
            lambda: metric_sum(m.registry, "citemon_answers_total") >= len(sent),
            30,
            "every answer to be counted",
        )
        await wait_for(lambda: m.pipeline.stats.commits > 0, 10, "a commit")
        for codec in CODECS:
            counted = metric_sum(m.registry, "citemon_answers_total", version=f"v-{codec}")
            assert counted == 5, f"{codec}: {counted} answers counted of 5"
        assert verdicts_by_version(m.registry) == expected
        assert metric_sum(m.registry, "citemon_dead_letters_total") == 0
        assert metric_sum(m.registry, "citemon_spans_total", outcome="invalid") == 0


def _healthz(port: int) -> int:
    return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code


async def _committed(bootstrap: str, topic: str, partitions: int) -> list[int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=f"g.{topic}")
    await consumer.start()
    try:
        return [await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)]
    finally:
        await consumer.stop()


def _without_lz4(
    bootstrap: str, topic: str, port: int, log_path: Path, *extra: str
) -> subprocess.Popen[bytes]:
    """``citemon run`` on ``topic`` in a process whose aiokafka cannot decode lz4."""
    flags = [
        "--bootstrap-servers", bootstrap, "--topic", topic, "--group", f"g.{topic}",
        "--dlq-topic", f"{topic}.dlq", "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
        "--commit-interval", "0.2", "--budget-per-minute", "0", "--judge", "lexical", *extra,
    ]  # fmt: skip
    return start_process(flags, faults=["--disable-codecs", "lz4"], log_path=log_path)


def _answers(port: int) -> float:
    return (scrape(port) or {}).get("citemon_answers_total", 0.0)


async def test_an_undecodable_batch_is_dead_lettered_whole_and_nothing_else_is_lost(
    kafka_bootstrap: str, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    """Partition 0 holds none | lz4 | gzip batches, partitions 1–5 good ones, all fetched
    together by a monitor that cannot decode lz4: the lz4 batch alone goes to the DLQ (raw,
    with its offsets and reason), every other answer is counted once, offsets commit to the
    end, the process stays healthy and goes on consuming what comes next.

    Two losses are provoked: the none batch shares a fetch with the lz4 one (aiokafka never
    returns it), and when aiokafka drained another partition before raising (random order:
    5 times in 6 with six partitions) that partition's records are dropped too, and must be
    rewound."""
    topic = await kafka_topic(partitions=PARTITIONS)
    dlq = f"{topic}.dlq"
    rng = random.Random(11)
    good: list[AnswerRecord] = []
    plan = [(0, "none", 4), (0, "lz4", 3), (0, "gzip", 4)]
    decodable = [c for c in CODECS if c != "lz4"]
    plan += [(p, decodable[p % len(decodable)], 3) for p in range(1, PARTITIONS)]
    bad_messages: list[Message] = []
    for partition, codec, n in plan:
        records, messages = answers(f"p{partition}-{codec}", n, rng)
        await send_batch(kafka_bootstrap, topic, partition, codec, messages)
        if codec == "lz4":
            bad_messages = messages
        else:
            good += records
    port = free_port()
    log_path = tmp_path / "run.log"
    proc = _without_lz4(kafka_bootstrap, topic, port, log_path)
    try:
        await wait_for(lambda: ready(port), 30, "the monitor to be ready")

        await wait_for(lambda: _answers(port) >= len(good), 30, "the decodable answers")
        ends = [4 + 3 + 4] + [3] * (PARTITIONS - 1)
        deadline = asyncio.get_running_loop().time() + 20
        while await _committed(kafka_bootstrap, topic, PARTITIONS) != ends:
            assert asyncio.get_running_loop().time() < deadline, "offsets did not commit past"
            await asyncio.sleep(0.2)
        sums = scrape(port) or {}
        assert sums.get("citemon_answers_total") == len(good)
        assert sums.get("citemon_dead_letters_total") == 1
        text = (await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/metrics")).text
        assert 'citemon_dead_letters_total{reason="unsupported_codec"} 1.0' in text
        assert await asyncio.to_thread(_healthz, port) == 200
        assert proc.poll() is None

        # The stream keeps flowing: a later batch on the same partition is scored.
        _, messages = answers("p0-later", 2, rng)
        await send_batch(kafka_bootstrap, topic, 0, "zstd", messages)
        await wait_for(lambda: _answers(port) >= len(good) + 2, 30, "the answers sent afterwards")
        assert _answers(port) == len(good) + 2
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.to_thread(proc.wait, 30)
    assert rc == 0, log_path.read_text()[-3000:]
    log_text = log_path.read_text()
    assert "skipping undecodable batch" in log_text and "offsets 4-6 (lz4" in log_text

    (dead,) = await read_topic(kafka_bootstrap, dlq)
    headers: dict[str, Any] = dict(dead.headers)
    assert headers["citemon.error"] == b"unsupported_codec"
    assert b"lz4" in headers["citemon.error.message"]
    assert headers["citemon.source"] == f"{topic}/0/4".encode()
    assert headers["citemon.batch.offsets"] == b"4-6"
    assert headers["citemon.batch.codec"] == b"lz4"
    # The value is the batch itself: this process has lz4, and reads back what was skipped.
    batch = MemoryRecords(dead.value).next_batch()
    assert [(r.offset, r.key, r.value) for r in batch] == [
        (4 + i, key, value) for i, (key, value) in enumerate(bad_messages)
    ]
    per_version = Counter(r.version for r in good)
    assert sum(per_version.values()) == len(good) == 8 + 3 * (PARTITIONS - 1)


async def test_the_rekey_stage_dead_letters_an_undecodable_batch_and_rekeys_the_rest(
    kafka_bootstrap: str, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    """With ``--rekey-topic``, the stage reads the input before scoring does: the lz4 batch it
    cannot decode goes to the DLQ raw, in the transaction that commits past it, and is counted;
    every other answer is re-keyed and scored once, and the monitor stays up."""
    topic = await kafka_topic(partitions=3)
    rekeyed = await kafka_topic(partitions=2)
    dlq = f"{topic}.dlq"
    rng = random.Random(12)
    good: list[AnswerRecord] = []
    plan = [(0, "none", 2), (0, "lz4", 3), (0, "gzip", 2), (1, "zstd", 3), (2, "snappy", 3)]
    for partition, codec, n in plan:
        records, messages = answers(f"r{partition}-{codec}", n, rng)
        await send_batch(kafka_bootstrap, topic, partition, codec, messages)
        if codec != "lz4":
            good += records
    port = free_port()
    log_path = tmp_path / "run.log"
    proc = _without_lz4(kafka_bootstrap, topic, port, log_path, "--rekey-topic", rekeyed)
    try:
        await wait_for(lambda: ready(port), 30, "the monitor to be ready")
        await wait_for(lambda: _answers(port) >= len(good), 60, "the decodable answers")
        text = (await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/metrics")).text
        assert 'citemon_dead_letters_total{reason="unsupported_codec"} 1.0' in text

        def input_lags() -> dict[str, float]:
            families = text_string_to_metric_families(
                httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            )
            return {
                s.labels["partition"]: s.value
                for f in families
                if f.name == "citemon_consumer_lag"
                for s in f.samples
                if s.labels["topic"] == topic
            }

        # The stage's own lag on the input, beside the scoring lag: all three partitions, to 0.
        await wait_for(
            lambda: input_lags() == {"0": 0.0, "1": 0.0, "2": 0.0}, 30, "the input lag to be 0"
        )
        assert await asyncio.to_thread(_healthz, port) == 200
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.to_thread(proc.wait, 30)
    assert rc == 0, log_path.read_text()[-3000:]
    assert scored_at_exit(log_path.read_text()) == len(good)
    assert "re-key: skipping undecodable batch" in log_path.read_text()
    (dead,) = await read_topic(kafka_bootstrap, dlq)
    headers: dict[str, Any] = dict(dead.headers)
    assert headers["citemon.error"] == b"unsupported_codec"
    assert headers["citemon.batch.offsets"] == b"2-4"
    assert [r.offset for r in MemoryRecords(dead.value).next_batch()] == [2, 3, 4]
    # Re-keyed once each: one record per good answer, keyed by its trace ID.
    keys = [r.key for r in await read_topic(kafka_bootstrap, rekeyed)]
    assert len(keys) == len(set(keys)) == len(good)
    assert all(re.fullmatch(rb"[0-9a-f]{32}", k) for k in keys)
