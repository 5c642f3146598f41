"""A monitor that cannot fail silently, on the real broker.

* A supervised background task that dies turns ``/healthz`` to 503 and the process exits 1
  with the cause logged (the real process, whose consumer's first commit fails: the commit
  loop dies; in-process, a consumer whose log ends fail: the lag loop dies; and the metrics
  listener really closed). The faults are injected clients (``tests/kafka_faults.py``).
* While a 2 MB answer (a 1 MB answer of ~13,000 sentences plus 1 MB of passages) is split and
  judged off the event loop, the consumer keeps its group membership under a 6 s session
  timeout (the other member never gets its partition; no rebalance) and ``/healthz`` answers.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citemon._core.errors import MonitorFailed
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    metric_sum,
    publish,
    run_monitor,
    settings_for,
    start_process,
    wait_for,
)
from tests.integration.prometheus_support import free_port
from tests.kafka_faults import FaultyClients

SESSION_TIMEOUT_MS = 6000  # the broker's minimum (group.min.session.timeout.ms)
SENTENCE = "The reactor output rose by twelve percent in the third quarter of the year. [p0] "


def _healthz(port: int, timeout_s: float = 2.0) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=timeout_s).status_code
    except httpx.HTTPError:
        return None


async def test_a_dead_commit_loop_turns_healthz_unhealthy_and_the_process_exits_1(
    kafka_bootstrap: str, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    topic = await kafka_topic(partitions=1)
    # First a record that is no OTLP (dead-lettered: finished at once, so the first commit
    # comes at once, and fails), then answers whose judge takes 30 s a call: in flight when the
    # commit loop dies, so the drain (4 s, then they are cancelled) holds the process long
    # enough to see /healthz say 503.
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"not an OTLP payload", partition=0)
    finally:
        await producer.stop()
    await asyncio.to_thread(publish, kafka_bootstrap, topic, [("v1", 6, False)], seed=3)
    port = free_port()
    log = tmp_path / "run.log"
    flags = (
        f"--bootstrap-servers {kafka_bootstrap} --topic {topic} --group g.{topic} "
        f"--dlq-topic {topic}.dlq --metrics-port {port} --metrics-host 127.0.0.1 "
        "--budget-per-minute 0 --drain-timeout 4 --judge tests.integration.slow_judge:factory"
    )
    proc = start_process(
        flags.split(),
        env={"CITEMON_TEST_JUDGE_DELAY_S": "30"},
        log_path=log,
        faults=["--fail-commit"],
    )
    seen: list[int | None] = []
    try:
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            status = await asyncio.to_thread(_healthz, port, 1.0)
            if not seen or seen[-1] != status:
                seen.append(status)
            await asyncio.sleep(0.05)
        assert proc.poll() is not None, f"the process did not exit; /healthz said {seen}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    text = log.read_text(errors="replace")
    assert proc.returncode == 1, text[-3000:]
    statuses = [s for s in seen if s is not None]
    assert 200 in statuses and 503 in statuses, seen
    assert statuses.index(503) > statuses.index(200)
    assert statuses[statuses.index(503) :] == [503]  # never healthy again once it said 503
    cause = "InjectedFault('the test refused the first commit')"
    assert f"background task citemon-commit died: {cause}" in text
    assert "citemon: error: background task citemon-commit died" in text
    assert "Traceback" in text  # the cause's stack is logged, not only its name


async def test_a_closed_metrics_listener_stops_the_monitor_with_the_cause(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    settings = settings_for(kafka_bootstrap, topic)
    with pytest.raises(MonitorFailed, match="background task citemon-metrics was cancelled"):
        async with run_monitor(settings) as mon:
            await wait_for(lambda: mon.pipeline.ready, 30, "partitions assigned")
            assert mon.pipeline.live
            mon.server._server.close()  # type: ignore[union-attr]  # the listener goes away
            await wait_for(lambda: not mon.pipeline.live, 10, "the pipeline to notice")
            assert not mon.pipeline.ready
            await asyncio.wait_for(asyncio.shield(mon.task), 30)


async def test_a_dead_lag_loop_stops_the_monitor_with_the_cause(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    settings = settings_for(kafka_bootstrap, topic)
    with pytest.raises(MonitorFailed, match="background task citemon-lag died: RuntimeError"):
        async with run_monitor(settings, clients=FaultyClients(fail_lag=True)) as mon:
            await wait_for(lambda: not mon.pipeline.live, 30, "the lag loop's death")
            assert not mon.pipeline.ready
            await asyncio.wait_for(asyncio.shield(mon.task), 30)


def _big_answer_payload() -> tuple[bytes, int]:
    """One ``rag.answer`` span: a 0.99 MB answer of identical cited sentences, p0 (which
    entails each) and 99 filler passages, 10 kB each; returns the OTLP bytes and the claims."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "big"}),
        span_limits=SpanLimits(max_span_attributes=1000),  # the SDK keeps 128 by default
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    n = 990_000 // len(SENTENCE)
    attributes: dict[str, Any] = {"output.value": SENTENCE * n, "input.value": "q"}
    filler = ("filler text " * 850)[:10_000]
    # p0 holds 1 kB more, so each of the ~12,000 checks reads 1 kB: scoring takes about twice
    # the session timeout even on an idle machine (or the test would prove nothing).
    texts = [SENTENCE.split(" [")[0] + " " + filler[:1_000]] + [filler] * 99
    for i, text in enumerate(texts):
        attributes[f"retrieval.documents.{i}.document.id"] = f"p{i}"
        attributes[f"retrieval.documents.{i}.document.content"] = text
    provider.get_tracer("t").start_span("rag.answer", attributes=attributes).end()
    (span,) = exporter.get_finished_spans()
    return encode_spans([span]).SerializeToString(), n


class _Assignments(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.assigned: list[set[int]] = []

    async def on_partitions_revoked(self, revoked: Any) -> None:
        return None

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned.append({tp.partition for tp in assigned})


@pytest.mark.timeout(240)  # scoring takes 15-60 s here, depending on the machine's load
async def test_a_2mb_answer_is_scored_without_losing_group_membership(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=2)
    payload, claims = _big_answer_payload()
    assert 1_900_000 < len(payload) < 2_200_000
    # The other member joins first, then the monitor: one partition each.
    other_listener = _Assignments()
    other = AIOKafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        group_id=f"g.{topic}",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=SESSION_TIMEOUT_MS // 4,
    )
    other.subscribe([topic], listener=other_listener)
    await other.start()
    polling = asyncio.create_task(_poll_forever(other))
    settings = settings_for(
        kafka_bootstrap, topic, session_timeout_ms=SESSION_TIMEOUT_MS, lag_interval_s=1.0
    )
    try:
        await wait_for(lambda: bool(other.assignment()), 30, "the other member's partitions")
        async with run_monitor(settings) as mon:
            # The other member's listener has heard of its new assignment too: aiokafka sets
            # ``assignment()`` before it calls the listener, so counting its assignments as
            # soon as ``assignment()`` shows one partition could miss that very rebalance.
            await wait_for(
                lambda: (
                    len(mon.pipeline.assigned) == 1
                    and len(other.assignment()) == 1
                    and other_listener.assigned[-1:]
                    == [{tp.partition for tp in other.assignment()}]
                ),
                45,
                "one partition each",
            )
            (mine,) = mon.pipeline.assigned
            theirs = {tp.partition for tp in other.assignment()}
            rebalances = mon.pipeline.stats.rebalances
            assignments = len(other_listener.assigned)
            producer = AIOKafkaProducer(
                bootstrap_servers=kafka_bootstrap,
                compression_type="gzip",  # 2 MB of repeated text is ~20 kB on the wire
                max_request_size=8 * 1024 * 1024,
            )
            await producer.start()
            try:
                await producer.send_and_wait(topic, payload, partition=mine.partition)
            finally:
                await producer.stop()
            await wait_for(lambda: mon.pipeline.inflight == 1, 30, "the big answer in flight")
            started = time.monotonic()
            probes = 0
            while metric_sum(mon.registry, "citemon_answers_total") < 1:
                assert time.monotonic() - started < 150, "the big answer was not scored"
                # /healthz is served by the same event loop the scoring shares.
                assert await asyncio.to_thread(_healthz, mon.server.port) == 200
                probes += 1
                assert {tp.partition for tp in other.assignment()} == theirs
                assert mon.pipeline.assigned == {mine}
                await asyncio.sleep(0.25)
            scoring_s = time.monotonic() - started
            # Scoring outlasted the session timeout: the membership was really at stake.
            assert scoring_s > SESSION_TIMEOUT_MS / 1000, scoring_s
            assert probes >= 4
            assert mon.pipeline.stats.rebalances == rebalances  # no revoke, no rejoin
            assert len(other_listener.assigned) == assignments
            assert metric_sum(mon.registry, "citemon_claims_total", verdict="correct") == claims
    finally:
        polling.cancel()
        await asyncio.gather(polling, return_exceptions=True)
        await other.stop()


async def _poll_forever(consumer: AIOKafkaConsumer) -> None:
    while True:
        await consumer.getmany(timeout_ms=200)
