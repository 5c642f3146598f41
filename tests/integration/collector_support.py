"""The project's own OpenTelemetry Collector (``make collector``) for tests: find it, run it.

The Collector runs ``deploy/otel-collector.yaml`` itself, merged with a small override file
(``--config A --config B``: maps merge, B wins) that changes only what two processes on one
machine cannot share — the OTLP ports, the topic, the Collector's own metrics port — plus, where
a test says so, the exporter's ``compression``. The broker address goes in through the shipped
file's own ``${env:KAFKA_BROKERS}``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from citemon.service.batches import CODECS, split_batches
from tests.conftest import REPO, need_server
from tests.integration.prometheus_support import free_port

__all__ = [
    "SHIPPED_CONFIG",
    "RunningCollector",
    "batch_codecs",
    "collector_binary",
    "fully_committed",
    "metric_samples",
    "run_collector",
    "total",
]

SHIPPED_CONFIG = REPO / "deploy" / "otel-collector.yaml"
COLLECTOR_SCRIPT = REPO / "deploy" / "collector.sh"
READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def collector_binary() -> Path:
    """The built Collector (``deploy/collector.sh path``); fails under CI=true, else skips."""
    try:
        out = subprocess.run(
            [str(COLLECTOR_SCRIPT), "path"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        need_server("the OpenTelemetry Collector", f"deploy/collector.sh path: {exc}")
        raise  # need_server raised already
    if out.returncode != 0 or not out.stdout.strip():
        need_server(
            "the OpenTelemetry Collector",
            out.stderr.strip() or "deploy/collector.sh path printed nothing (make collector)",
        )
    return Path(out.stdout.strip())


@dataclass(frozen=True)
class RunningCollector:
    grpc_endpoint: str
    """``127.0.0.1:PORT`` for ``OTLPSpanExporter(endpoint=..., insecure=True)`` (gRPC)."""
    http_endpoint: str
    """``http://127.0.0.1:PORT/v1/traces`` for the HTTP/protobuf exporter."""
    log_path: Path
    process: subprocess.Popen[bytes]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def override(topic: str, grpc_port: int, http_port: int, compression: str | None) -> dict[str, Any]:
    """What a test changes in the shipped config: ports, topic, self-metrics (and codec)."""
    kafka: dict[str, Any] = {"traces": {"topic": topic}}
    if compression is not None:
        kafka["producer"] = {"compression": compression}
    return {
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": f"127.0.0.1:{grpc_port}"},
                    "http": {"endpoint": f"127.0.0.1:{http_port}"},
                }
            }
        },
        "exporters": {"kafka": kafka},
        # Its own metrics would listen on :8888; several Collectors run here at once.
        "service": {"telemetry": {"metrics": {"level": "none"}}},
    }


@contextlib.contextmanager
def run_collector(
    binary: Path,
    workdir: Path,
    bootstrap: str,
    topic: str,
    *,
    compression: str | None = None,
    name: str = "otelcol",
) -> Iterator[RunningCollector]:
    """The Collector on ``deploy/otel-collector.yaml`` + overrides, until the block ends."""
    grpc_port, http_port = free_port(), free_port()
    overrides = workdir / f"{name}-overrides.yaml"
    overrides.write_text(yaml.safe_dump(override(topic, grpc_port, http_port, compression)))
    log_path = workdir / f"{name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [str(binary), "--config", str(SHIPPED_CONFIG), "--config", str(overrides)],
            env={**os.environ, "KAFKA_BROKERS": bootstrap},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (_port_open(grpc_port) and _port_open(http_port)):
            if proc.poll() is not None:
                raise AssertionError(
                    f"the Collector exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"the Collector did not listen within {READY_TIMEOUT_S} s")
            time.sleep(0.1)
        yield RunningCollector(
            f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}/v1/traces", log_path, proc
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # it flushes its queue to Kafka on the way out
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


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
