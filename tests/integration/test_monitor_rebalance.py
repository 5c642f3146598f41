"""Exact counts through consumer-group rebalances and a frozen replica (docs/design.md, "Counting
guarantee"): every answer published is counted once over all replicas and written to the
results topic once, whoever owned its partition when.

* Replicas join and leave mid-stream while OpenInference traces are in flight and held by the
  trace assembler (their root lives in another service, so only the window settles them).
* A replica frozen (SIGSTOP) past its session timeout with answers in flight loses its
  partitions to another; woken (SIGCONT), it must neither publish nor count what it held.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    Monitor,
    metric_sum,
    publish,
    read_topic,
    ready,
    run_monitor,
    scrape,
    settings_for,
    start_process,
    wait_for,
)
from tests.integration.prometheus_support import free_port

PASSAGES = {
    "n-1": "Audit logs are kept for 90 days on the Business plan.",
    "n-2": "Enterprise workspaces keep audit logs for 365 days.",
}
ANSWER = "Audit logs are kept for 90 days [n-1]. Enterprise keeps 365 days [n-2]."
#: The broker's minimum session timeout: a frozen member loses its partitions after this.
SESSION_TIMEOUT_MS = 6000


def rootless_traces(n: int) -> list[tuple[bytes, list[ReadableSpan]]]:
    """``n`` traces whose root span lives in another service: each is a RETRIEVER span and an
    LLM span (children of a remote parent), returned as two messages keyed by trace ID."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "oi-bot", "service.version": "oi-1"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("oi")
    docs: dict[str, str] = {}
    for i, (pid, text) in enumerate(PASSAGES.items()):
        docs[f"retrieval.documents.{i}.document.id"] = pid
        docs[f"retrieval.documents.{i}.document.content"] = text
    out: list[tuple[bytes, list[ReadableSpan]]] = []
    for t in range(n):
        remote = SpanContext(
            trace_id=0x5EED_0000_0000_0000_0000_0000_0000_0000 + t + 1,
            span_id=0xABC0_0000_0000_0000 + t + 1,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        parent = trace.set_span_in_context(NonRecordingSpan(remote))
        tracer.start_span(
            "retrieve", context=parent, attributes={"openinference.span.kind": "RETRIEVER", **docs}
        ).end()
        tracer.start_span(
            "synthesize",
            context=parent,
            attributes={
                "openinference.span.kind": "LLM",
                "input.value": "how long are audit logs kept?",
                "output.value": ANSWER,
            },
        ).end()
        retriever, llm = exporter.get_finished_spans()
        exporter.clear()
        key = f"{remote.trace_id:032x}".encode()
        out += [(key, [retriever]), (key, [llm])]
    return out


async def _send_paced(
    bootstrap: str, topic: str, messages: list[tuple[bytes, list[ReadableSpan]]], seconds: float
) -> None:
    """Publish ``messages`` spread over about ``seconds`` (a steady stream, not one burst)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        step = seconds / len(messages)
        for key, spans in messages:
            await producer.send(topic, encode_spans(spans).SerializeToString(), key=key)
            await asyncio.sleep(step)
        await producer.flush()
    finally:
        await producer.stop()


async def _all_committed(bootstrap: str, topic: str, partitions: int) -> bool:
    """Whether the monitors' group has committed every partition up to its log end."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=f"g.{topic}")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        committed = [await consumer.committed(tp) for tp in tps]
    finally:
        await consumer.stop()
    return all((c or 0) >= ends[tp] for c, tp in zip(committed, tps, strict=True))


async def _wait_all_committed(
    bootstrap: str, topic: str, partitions: int, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while not await _all_committed(bootstrap, topic, partitions):
        assert time.monotonic() < deadline, "the group did not commit every record in time"
        await asyncio.sleep(0.3)


def _result_keys(records: list[Any]) -> Counter[tuple[str, str]]:
    bodies = [json.loads(r.value) for r in records]
    return Counter((b["trace_id"], b["span_id"]) for b in bodies)


def _answers(mon: Monitor) -> float:
    return metric_sum(mon.registry, "citemon_answers_total")


@pytest.mark.parametrize("with_results", [True, False], ids=["results-topic", "no-results-topic"])
async def test_replicas_joining_and_leaving_mid_stream_count_every_trace_once(
    kafka_bootstrap: str,
    kafka_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
    with_results: bool,
) -> None:
    n_traces, partitions = 300, 6
    topic = await kafka_topic(partitions=partitions)
    results = await kafka_topic(partitions=1) if with_results else None
    monkeypatch.setenv("CITEMON_TEST_JUDGE_DELAY_S", "0.1")
    settings = settings_for(
        kafka_bootstrap,
        topic,
        ("--judge", "tests.integration.slow_judge:factory"),
        results_topic=results,
        # The window outlasts the revoke's wait (as the defaults do, 30 s and 5 s), so a revoke
        # finds traces still held for assembly and must not leave them to be counted later.
        trace_window_s=3.0,
        revoke_timeout_s=1.0,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        max_inflight_answers=8,
    )
    messages = rootless_traces(n_traces)
    first = run_monitor(settings)
    second = run_monitor(settings)
    a = await first.__aenter__()
    a_open, b_open = True, False
    try:
        await wait_for(lambda: a.pipeline.ready, 30, "the first replica's partitions")
        sender = asyncio.create_task(_send_paced(kafka_bootstrap, topic, messages, 15.0))
        await wait_for(lambda: _answers(a) >= 40, 60, "the first replica to count 40 answers")
        held_at_join, inflight_at_join = len(a.pipeline.assembler), a.pipeline.inflight
        b = await second.__aenter__()
        b_open = True
        await wait_for(lambda: b.pipeline.ready, 60, "the second replica to join")
        await wait_for(lambda: _answers(b) >= 20, 60, "the second replica to count answers")
        held_at_leave, inflight_at_leave = len(a.pipeline.assembler), a.pipeline.inflight
        assert not sender.done(), "the stream ended before the first replica left"
        a_open = False
        await first.__aexit__(None, None, None)  # the first replica leaves mid-stream
        await sender
        await _wait_all_committed(kafka_bootstrap, topic, partitions, 90)
        # Committed offsets no longer wait for held traces (they wait in the held-parts store):
        # the last ones are counted when their window settles them.
        await asyncio.wait_for(b.pipeline.caught_up(), 60)
    finally:
        if b_open:
            await second.__aexit__(None, None, None)
        if a_open:
            await first.__aexit__(None, None, None)
    counted = (_answers(a), _answers(b))
    committed = (a.pipeline.stats.answers_committed, b.pipeline.stats.answers_committed)
    print(
        f"\n{n_traces} rootless traces on {partitions} partitions; replica 2 joined with "
        f"{held_at_join} traces held and {inflight_at_join} answers in flight at replica 1, "
        f"replica 1 left with {held_at_leave} held and {inflight_at_leave} in flight; counted "
        f"{counted[0]:.0f} + {counted[1]:.0f} = {sum(counted):.0f}; "
        f"rebalances {a.pipeline.stats.rebalances} + {b.pipeline.stats.rebalances}"
    )
    # The rebalances landed on traces held for assembly and answers being scored.
    assert held_at_join > 0 and held_at_leave > 0
    assert inflight_at_join > 0 or inflight_at_leave > 0
    assert 0 < counted[1] < n_traces and 0 < counted[0] < n_traces
    assert sum(counted) == n_traces
    assert committed == (int(counted[0]), int(counted[1]))
    assert metric_sum(a.registry, "citemon_dead_letters_total") == 0
    assert metric_sum(b.registry, "citemon_dead_letters_total") == 0
    if results is not None:
        keys = _result_keys(await read_topic(kafka_bootstrap, results))
        assert sum(keys.values()) == n_traces
        assert len(keys) == n_traces


# -- a frozen replica ---------------------------------------------------------------------------


def _flags(bootstrap: str, topic: str, port: int, *extra: str) -> list[str]:
    return [
        "--bootstrap-servers", bootstrap, "--topic", topic, "--group", f"g.{topic}",
        "--dlq-topic", f"{topic}.dlq", "--metrics-port", str(port),
        "--metrics-host", "127.0.0.1", "--commit-interval", "0.2", "--budget-per-minute", "0",
        "--judge", "tests.integration.slow_judge:factory", "--max-inflight-answers", "8",
        *extra,
    ]  # fmt: skip


_EXIT_LINE = re.compile(r"citemon run: (\d+) records, (\d+) answers scored")
_STATS_LINE = re.compile(r"answers_started': (\d+), 'answers_committed': (\d+)")


def _assignments(log: Path) -> int:
    """How often the process logged a partition assignment (each rebalance it joined)."""
    return log.read_text().count("citemon._service.pipeline: partitions assigned")


def _exit_counts(log: Path) -> tuple[int, int]:
    """(answers started, answers committed and counted) from a stopped process's log."""
    text = log.read_text()
    found = _STATS_LINE.search(text)
    assert found, text[-3000:]
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize("with_results", [True, False], ids=["results-topic", "no-results-topic"])
async def test_replica_frozen_past_its_session_timeout_neither_publishes_nor_counts_twice(
    kafka_bootstrap: str, kafka_topic: TopicFactory, tmp_path: Path, with_results: bool
) -> None:
    topic = await kafka_topic(partitions=2)
    results = await kafka_topic(partitions=1) if with_results else None
    sent = await asyncio.to_thread(publish, kafka_bootstrap, topic, [("v1", 60, False)], seed=4)
    n = len(sent)
    env = {
        "CITEMON_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
        "CITEMON_TEST_JUDGE_DELAY_S": "0.4",
    }
    extra = ["--results-topic", results] if results is not None else []
    port_a, port_b = free_port(), free_port()
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    a = start_process(_flags(kafka_bootstrap, topic, port_a, *extra), env=env, log_path=log_a)
    b: Any = None
    try:
        await wait_for(lambda: ready(port_a), 30, "replica A to be ready")
        await wait_for(
            lambda: (scrape(port_a, 0.5) or {}).get("citemon_answers_total", 0) >= 4,
            60,
            "replica A to commit some answers",
        )
        a.send_signal(signal.SIGSTOP)  # with up to 8 answers in its judge
        frozen_at = time.monotonic()
        b = start_process(_flags(kafka_bootstrap, topic, port_b, *extra), env=env, log_path=log_b)
        await wait_for(lambda: ready(port_b), 60, "replica B to take the partitions over")
        took_over_s = time.monotonic() - frozen_at
        await _wait_all_committed(kafka_bootstrap, topic, 2, 120)
        assigned_before = _assignments(log_a)
        a.send_signal(signal.SIGCONT)
        # Woken, A finishes what its judge held and tries to commit it; then it finds itself
        # out of the group, rejoins and is assigned a partition again, with nothing left to do.
        await wait_for(
            lambda: _assignments(log_a) > assigned_before, 60, "replica A to rejoin the group"
        )
        a.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(a.wait, 60) == 0
        b.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(b.wait, 60) == 0
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)
    started_a, counted_a = _exit_counts(log_a)
    _, counted_b = _exit_counts(log_b)
    dropped_a = started_a - counted_a
    print(
        f"\nfrozen replica: B took over {took_over_s:.1f} s after the SIGSTOP; A counted "
        f"{counted_a} (started {started_a}, {dropped_a} dropped after waking), B counted "
        f"{counted_b}; total {counted_a + counted_b} of {n}"
    )
    if results is not None:
        keys = _result_keys(await read_topic(kafka_bootstrap, results))
        assert max(keys.values()) == 1, f"duplicated results: {keys.most_common(3)}"
        assert len(keys) == n
    assert counted_a + counted_b == n
    assert 0 < counted_a < n and 0 < counted_b < n
    assert dropped_a > 0, "A held no answers in flight when frozen; the test proved nothing"
