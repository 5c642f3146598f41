"""How the aiokafka internals of :mod:`citemon._service.kafka` behave on the installed
aiokafka against the real broker: each test is one assumption the monitor makes, so an aiokafka
upgrade that breaks one fails here by name (``tests/unit/test_kafka_internals_api.py`` checks the
signatures)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiokafka.codec
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError, UnsupportedCodecError

from citemon._service.kafka import (
    cluster_metadata,
    fetch_record_set,
    first_batch,
    new_client,
    partition_records,
    producer_is_fatal,
    request_rejoin,
    split_batches,
)
from tests.integration.conftest import TopicFactory
from tests.kafka_faults import disable_codecs

READ_COMMITTED = 1


class _Count(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.assigned = 0

    async def on_partitions_revoked(self, revoked: Any) -> None:
        return None

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned += 1


async def _poll_until(consumer: AIOKafkaConsumer, done: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await consumer.getmany(timeout_ms=100)


async def test_request_rejoin_makes_the_group_assign_again(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    listener = _Count()
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=f"g.{topic}")
    consumer.subscribe([topic], listener=listener)
    await consumer.start()
    try:
        await _poll_until(consumer, lambda: listener.assigned == 1, "the first assignment")
        assert request_rejoin(consumer)
        await _poll_until(consumer, lambda: listener.assigned == 2, "the assignment after rejoin")
        assert consumer.assignment() == {TopicPartition(topic, 0)}
    finally:
        await consumer.stop()


async def test_a_fenced_transactional_producer_reports_itself_fatal(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)

    def producer() -> AIOKafkaProducer:
        return AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"tx.{topic}")

    old, new = producer(), producer()
    await old.start()
    try:
        assert not producer_is_fatal(old)
        await new.start()  # init_transactions with the same ID fences the old one
        with pytest.raises(KafkaError):
            async with old.transaction():
                await (await old.send(topic, b"x"))
        assert producer_is_fatal(old) and not producer_is_fatal(new)
    finally:
        await new.stop()
        await old.stop()


async def test_cluster_metadata_lists_a_topics_partitions(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=3)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None)
    await consumer.start()
    try:
        cluster = await cluster_metadata(consumer)
    finally:
        await consumer.stop()
    assert topic in cluster.topics()
    assert cluster.partitions_for_topic(topic) == {0, 1, 2}


async def _aborted_then_committed(bootstrap: str, topic: str) -> None:
    """Offsets 0-1 aborted (2 its marker), 3-5 committed (6 its marker)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"tx.{topic}", compression_type="gzip"
    )
    await producer.start()
    try:
        await producer.begin_transaction()
        for i in range(2):
            await producer.send(topic, f"aborted-{i}".encode(), partition=0)
        await producer.abort_transaction()
        async with producer.transaction():
            for i in range(3):
                await producer.send(topic, f"kept-{i}".encode(), partition=0)
    finally:
        await producer.stop()


async def test_a_raw_fetch_unpacked_as_the_consumer_does_skips_aborted_records(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    await _aborted_then_committed(kafka_bootstrap, topic)
    client = await new_client({"bootstrap_servers": kafka_bootstrap}, "internals-test")
    try:
        fetched = await fetch_record_set(
            client, tp, 0, max_bytes=1 << 20, isolation_level=READ_COMMITTED
        )
    finally:
        await client.close()
    assert fetched is not None
    raw, aborted = fetched
    assert aborted  # the aborted transaction's producer and first offset, where we read it
    chunks = split_batches(raw)
    assert [r.value for r in first_batch(chunks[0])] == [b"aborted-0", b"aborted-1"]

    class Batches:
        def __init__(self) -> None:
            self.index = -1

        def has_next(self) -> bool:
            return self.index + 1 < len(chunks)

        def next_batch(self) -> Any:
            self.index += 1
            return first_batch(chunks[self.index])

    records = list(partition_records(tp, Batches(), aborted, 0, READ_COMMITTED))
    assert [(r.offset, r.value) for r in records] == [
        (3, b"kept-0"),
        (4, b"kept-1"),
        (5, b"kept-2"),
    ]


async def test_a_disabled_codec_makes_the_consumers_decoder_refuse_its_batches(
    kafka_bootstrap: str, kafka_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = await kafka_topic(partitions=1)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, compression_type="gzip")
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"zipped", partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka_bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    monkeypatch.setattr(aiokafka.codec, "has_gzip", aiokafka.codec.has_gzip)  # restored after
    disable_codecs("gzip")
    await consumer.start()
    try:
        with pytest.raises(UnsupportedCodecError):
            async with asyncio.timeout(30):
                while True:
                    await consumer.getmany(timeout_ms=200)
    finally:
        await consumer.stop()
    with pytest.raises(ValueError, match="unknown codec"):
        disable_codecs("brotli")
