"""The project's own OpenTelemetry Collector (``make collector``) for tests, and Kafka probes.

Finding and running the Collector (the shipped ``deploy/otel-collector.yaml`` plus an override
of ports, topic and self-metrics) is :mod:`citemon._commands._collector`, which ``citemon demo
--via-collector`` uses too; this module re-exports it and adds what only tests need.
"""

from __future__ import annotations

import struct
from pathlib import Path

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from citemon._commands._collector import (
    CollectorError,
    RunningCollector,
    override,
    run_collector,
)
from citemon._commands._collector import collector_binary as find_collector
from citemon._service.kafka import CODECS, split_batches
from tests.conftest import REPO, need_server

__all__ = [
    "SHIPPED_CONFIG",
    "RunningCollector",
    "batch_codecs",
    "collector_binary",
    "fully_committed",
    "metric_samples",
    "override",
    "run_collector",
    "total",
]

SHIPPED_CONFIG = REPO / "deploy" / "otel-collector.yaml"


def collector_binary() -> Path:
    """The built Collector (as the demo finds it); fails under CI=true, else skips."""
    try:
        return find_collector()
    except CollectorError as exc:
        need_server("the OpenTelemetry Collector", str(exc))
        raise  # need_server raised already


def metric_samples(port: int) -> list[Sample]:
    """Every sample on ``citemon run``'s ``/metrics`` (labels included)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def total(samples: list[Sample], name: str, **labels: str) -> float:
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def fully_committed(bootstrap: str, topic: str, group: str, partitions: int) -> bool:
    """Whether ``group`` committed every partition of ``topic`` up to its end (and it has any)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        committed = [await consumer.committed(tp) or 0 for tp in tps]
    finally:
        await consumer.stop()
    return sum(ends.values()) > 0 and committed == [ends[tp] for tp in tps]


async def batch_codecs(bootstrap: str, tp: TopicPartition) -> list[tuple[int, int, str]]:
    """``(base offset, record count, codec)`` of each batch in ``tp``, read raw from offset 0."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        client.add_topic(tp.topic)
        await client.force_metadata_update()
        node = client.cluster.leader_for_partition(tp)
        request = FetchRequest(0, 1, 1 << 20, 0, [(tp.topic, [(tp.partition, 0, 1 << 20)])])
        response = await client.send(node, request)
    finally:
        await client.close()
    ((_, partitions),) = response.topics
    ((_, error_code, _, *data),) = partitions
    assert error_code == 0
    out = []
    for chunk in split_batches(bytes(data[-1])):
        base, _, _, magic, _, attributes, last_delta = struct.unpack_from(">qiibIhi", chunk)
        assert magic == 2
        out.append((base, last_delta + 1, CODECS[attributes & 0x07]))
    return out
