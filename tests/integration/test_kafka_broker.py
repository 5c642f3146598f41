"""The local broker behaves like the Kafka the monitor relies on.

citemon's consumer needs keyed partitioning with headers (key = trace ID, DLQ errors travel in
a header), transactions that a ``read_committed`` reader honours, and group offsets that let a
restarted consumer resume where the last one committed. These tests check exactly that on the
real broker from ``deploy/kafka.sh``, so a misconfigured broker (say, a transaction log that
needs three replicas) fails here rather than deep inside a monitor test.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tests.integration.conftest import TopicFactory

DRAIN_TIMEOUT_S = 20.0


async def _drain(consumer: AIOKafkaConsumer, count: int) -> list[ConsumerRecord[bytes, bytes]]:
    """Exactly ``count`` records, or fail saying how many came before the deadline."""
    records: list[ConsumerRecord[bytes, bytes]] = []
    try:
        async with asyncio.timeout(DRAIN_TIMEOUT_S):
            while len(records) < count:
                batches = await consumer.getmany(timeout_ms=200)
                for batch in batches.values():
                    records.extend(batch)
    except TimeoutError:
        raise AssertionError(f"got {len(records)} of {count} records") from None
    # Nothing beyond what we expect may be waiting (a duplicate or a leaked aborted record).
    extra = await consumer.getmany(timeout_ms=300)
    assert not any(extra.values()), f"unexpected extra records: {extra}"
    return records


async def _read_to_end(consumer: AIOKafkaConsumer) -> list[ConsumerRecord[bytes, bytes]]:
    """Everything up to the end offsets seen now (for ``read_committed``: the LSO)."""
    partitions = consumer.assignment()
    ends = await consumer.end_offsets(list(partitions))
    records: list[ConsumerRecord[bytes, bytes]] = []
    async with asyncio.timeout(DRAIN_TIMEOUT_S):
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            batches = await consumer.getmany(timeout_ms=200)
            for batch in batches.values():
                records.extend(batch)
    return records


async def test_keyed_round_trip_with_headers_across_partitions(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=3)
    sent = [
        (f"trace-{i:02d}".encode(), f"span-batch-{i}".encode(), [("n", str(i).encode())])
        for i in range(30)
    ]
    # The same key twice must land on the same partition, after the first in offset order.
    sent.append((b"trace-07", b"span-batch-7-again", [("n", b"30"), ("retry", b"1")]))

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        futures = [
            await producer.send(topic, key=key, value=value, headers=headers)
            for key, value, headers in sent
        ]
        metadata = await asyncio.gather(*futures)
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka_bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        received = await _drain(consumer, len(sent))
    finally:
        await consumer.stop()

    by_position = {(r.partition, r.offset): r for r in received}
    assert len(by_position) == len(sent)
    for (key, value, headers), meta in zip(sent, metadata, strict=True):
        record = by_position[(meta.partition, meta.offset)]
        assert (record.key, record.value) == (key, value)
        assert [(k, bytes(v)) for k, v in record.headers] == headers

    per_partition: dict[int, int] = defaultdict(int)
    for meta in metadata:
        per_partition[meta.partition] += 1
    assert sorted(per_partition) == [0, 1, 2], f"keys did not spread: {dict(per_partition)}"
    assert sum(per_partition.values()) == 31
    first, again = metadata[7], metadata[30]
    assert again.partition == first.partition and again.offset > first.offset


async def test_aborted_transaction_is_invisible_to_read_committed(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, transactional_id=f"citemon-test-{uuid.uuid4().hex}"
    )
    await producer.start()
    try:
        await producer.begin_transaction()
        for i in range(3):
            await producer.send_and_wait(topic, f"aborted-{i}".encode())
        await producer.abort_transaction()

        async with producer.transaction():
            for i in range(3):
                await producer.send_and_wait(topic, f"committed-{i}".encode())
    finally:
        await producer.stop()

    async def read(isolation_level: str) -> list[bytes]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=kafka_bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
            isolation_level=isolation_level,
        )
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            return [r.value for r in await _read_to_end(consumer) if r.value is not None]
        finally:
            await consumer.stop()

    committed = await read("read_committed")
    everything = await read("read_uncommitted")
    assert committed == [b"committed-0", b"committed-1", b"committed-2"]
    # The aborted records did reach the log: only the isolation level hides them.
    assert everything == [b"aborted-0", b"aborted-1", b"aborted-2", *committed]


async def test_group_commit_and_resume(kafka_bootstrap: str, kafka_topic: TopicFactory) -> None:
    topic = await kafka_topic(partitions=3)
    group = f"citemon-test-{uuid.uuid4().hex}"
    partitions = [TopicPartition(topic, p) for p in range(3)]

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()

    async def produce(values: range) -> None:
        for i in values:
            await producer.send_and_wait(topic, str(i).encode(), key=f"k{i}".encode())

    def consumer() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            topic,
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )

    try:
        await produce(range(12))
        first = consumer()
        await first.start()
        try:
            seen_first = await _drain(first, 12)
            await first.commit()
            committed = {tp: await first.committed(tp) for tp in partitions}
            ends = await first.end_offsets(partitions)
        finally:
            await first.stop()  # leaves the group, so the next member gets every partition
        assert sorted(int(r.value or b"") for r in seen_first) == list(range(12))
        assert committed == ends
        assert sum(ends.values()) == 12

        # The broker, not the client, holds the group's offsets.
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            stored = await admin.list_consumer_group_offsets(group)
        finally:
            await admin.close()
        assert {tp: meta.offset for tp, meta in stored.items()} == ends

        await produce(range(12, 20))
        second = consumer()
        await second.start()
        try:
            seen_second = await _drain(second, 8)
        finally:
            await second.stop()
        assert sorted(int(r.value or b"") for r in seen_second) == list(range(12, 20))
        for record in seen_second:
            assert record.offset >= ends[TopicPartition(topic, record.partition)]
    finally:
        await producer.stop()
