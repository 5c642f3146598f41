"""Review of ``KafkaSpanExporter``'s lifecycle against real brokers.

The shared broker (9092) takes the traffic; a broker of this module's own (``deploy/kafka.sh`` on
``PORT``, default 19392) is frozen with SIGSTOP to play a broker that accepts connections and
never answers, the worst kind of outage, so the shared one is never touched.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citemon._otlp.decoding import decode_otlp_proto
from citemon_instrumentation import KafkaSpanExporter, record_answer
from tests.conftest import REPO
from tests.integration.conftest import TopicFactory, start_own_broker

PORT = int(os.environ.get("CITEMON_TEST_SHIM_KAFKA_PORT", "19392"))
RESOURCE = Resource.create({"service.name": "support-bot", "service.version": "v1"})
#: Timing slack for a loaded 2-core CI machine, in seconds.
SLACK_S = 0.25


def _spans(n: int, text: str = "t") -> tuple[ReadableSpan, ...]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(n):
        record_answer(
            question=f"q{i}", answer="a [p-1]", passages=[("p-1", text)], tracer_provider=provider
        )
    return memory.get_finished_spans()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _count_spans(bootstrap: str, topic: str, want: int, timeout_s: float = 20.0) -> int:
    """Spans in ``topic`` (decoded from every message), read until ``want`` or the timeout."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    seen = 0
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for msgs in (await consumer.getmany(timeout_ms=300)).values():
                seen += sum(decode_otlp_proto(m.value).span_count for m in msgs)  # type: ignore[arg-type]
            if seen >= want:
                # One more poll: anything past `want` would be a duplicate.
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    seen += sum(decode_otlp_proto(m.value).span_count for m in msgs)  # type: ignore[arg-type]
                break
    finally:
        await consumer.stop()
    return seen


async def _until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def _exporter_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "citemon-kafka-exporter"]


def _producers() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, AIOKafkaProducer))


# -- the frozen broker ----------------------------------------------------------------------------


class FrozenBroker:
    """This module's own broker; ``freeze()``/``thaw()`` stop and continue its process."""

    def __init__(self, bootstrap: str, pid: int) -> None:
        self.bootstrap = bootstrap
        self.pid = pid

    def freeze(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def frozen_broker() -> Iterator[FrozenBroker]:
    with start_own_broker(PORT) as own:
        broker = FrozenBroker(own.bootstrap, own.pid)
        try:
            yield broker
        finally:
            broker.thaw()  # a frozen broker would not stop


# -- export after shutdown, shutdown itself -------------------------------------------------------


async def test_export_after_shutdown_fails_at_once_and_starts_nothing(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    exporter = KafkaSpanExporter(kafka_bootstrap, topic)
    spans = _spans(3)
    assert await asyncio.to_thread(exporter.export, spans) is SpanExportResult.SUCCESS
    t0 = time.monotonic()
    await asyncio.to_thread(exporter.shutdown)
    first = time.monotonic() - t0
    t0 = time.monotonic()
    exporter.shutdown()  # idempotent: nothing left to do
    second = time.monotonic() - t0
    t0 = time.monotonic()
    result = exporter.export(spans)
    after = time.monotonic() - t0
    assert result is SpanExportResult.FAILURE
    assert after < 0.05 and second < 0.01 and first < 2.0, (after, second, first)
    assert (exporter.exported_spans, exporter.dropped_spans, exporter.failed_spans) == (3, 3, 0)
    assert _exporter_threads() == []
    assert await _count_spans(kafka_bootstrap, topic, 3) == 3


async def test_exports_racing_shutdown_never_restart_the_loop(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    exporter = KafkaSpanExporter(kafka_bootstrap, topic)
    spans = _spans(1)
    stop = threading.Event()
    results: list[SpanExportResult] = []

    def loop() -> None:
        while not stop.is_set():
            results.append(exporter.export(spans))

    workers = [threading.Thread(target=loop) for _ in range(4)]
    for w in workers:
        w.start()
    await _until(lambda: exporter.exported_spans >= 4, "exports to get through")
    await asyncio.to_thread(exporter.shutdown)
    # Exports after the shutdown fail at once, their spans counted dropped (not failed).
    await _until(lambda: exporter.dropped_spans >= 4, "exports after the shutdown")
    stop.set()
    for w in workers:
        await asyncio.to_thread(w.join, 15)
    assert SpanExportResult.SUCCESS in results and results[-1] is SpanExportResult.FAILURE
    assert _exporter_threads() == []
    # The window itself (past the flag check, before the loop starts), made deterministic:
    with pytest.raises(RuntimeError, match="shut down"):
        exporter._ensure_loop()
    assert _exporter_threads() == []
    n = len(results)
    assert exporter.exported_spans + exporter.failed_spans + exporter.dropped_spans == n
    assert await _count_spans(kafka_bootstrap, topic, exporter.exported_spans) == (
        exporter.exported_spans
    )


def test_force_flush_and_shutdown_never_connected_are_immediate() -> None:
    exporter = KafkaSpanExporter(f"127.0.0.1:{_closed_port()}", timeout_s=1.0)
    t0 = time.monotonic()
    assert exporter.force_flush(5000) is True  # nothing buffered, nothing to wait for
    exporter.shutdown(5000)
    assert time.monotonic() - t0 < 0.05


def test_force_flush_waits_for_a_running_export_and_says_it_failed() -> None:
    """No broker: an export running on another thread fails at its 1 s deadline; force_flush,
    called while it runs, waits for it (well within its own 10 s) and returns False."""
    exporter = KafkaSpanExporter(f"127.0.0.1:{_closed_port()}", timeout_s=1.0)
    results: list[SpanExportResult] = []
    worker = threading.Thread(target=lambda: results.append(exporter.export(_spans(2))))
    worker.start()
    until = time.monotonic() + 10.0
    while exporter.exports_in_flight == 0 and not results:
        assert time.monotonic() < until, "the export never started"
        time.sleep(0.001)
    try:
        assert exporter.force_flush(10_000) is False
        assert results == [SpanExportResult.FAILURE] and exporter.exports_in_flight == 0
        assert exporter.force_flush(1_000) is True  # nothing running: nothing failed since
    finally:
        worker.join(timeout=15)
        exporter.shutdown()


def _wait_until_it_serves(bootstrap: str, topic: str, *, deadline_s: float) -> None:
    probe = KafkaSpanExporter(bootstrap, topic, timeout_s=10.0)
    try:
        until = time.monotonic() + deadline_s
        while probe.export(_spans(1)) is not SpanExportResult.SUCCESS:
            assert time.monotonic() < until, f"the broker on {bootstrap} did not serve again"
    finally:
        probe.shutdown()


@pytest.mark.parametrize("flush_ms", [300, 1000])
def test_force_flush_and_shutdown_honour_their_timeouts_on_a_frozen_broker(
    frozen_broker: FrozenBroker, flush_ms: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    # The previous case froze the broker past its session timeout: a single-node KRaft broker
    # then re-registers with its own controller before it serves again (seconds, more on a busy
    # machine). Wait for that with an exporter of its own, so this case starts on a serving one.
    _wait_until_it_serves(frozen_broker.bootstrap, "frozen", deadline_s=90.0)
    exporter = KafkaSpanExporter(frozen_broker.bootstrap, "frozen", timeout_s=10.0)
    spans = _spans(6)
    assert exporter.export(spans[:1]) is SpanExportResult.SUCCESS  # connected, topic created
    frozen_broker.freeze()
    try:
        results: list[tuple[SpanExportResult, float]] = []
        started = time.monotonic()
        worker = threading.Thread(
            target=lambda: results.append((exporter.export(spans[1:]), time.monotonic()))
        )
        worker.start()
        # The export is on the loop, waiting on the frozen broker: force_flush must wait for it.
        until = started + 10.0
        while exporter.exports_in_flight == 0:
            assert time.monotonic() < until, "the export never reached the exporter's loop"
            time.sleep(0.001)
        waited_s = time.monotonic() - started

        t0 = time.monotonic()
        flushed = exporter.force_flush(flush_ms)
        flush_s = time.monotonic() - t0
        assert flushed is False  # it could not flush, and says so
        assert abs(flush_s - flush_ms / 1000) < SLACK_S, flush_s

        t0 = time.monotonic()
        exporter.shutdown(timeout_millis=flush_ms)
        shutdown_s = time.monotonic() - t0
        assert shutdown_s < flush_ms / 1000 + 0.5 + SLACK_S, shutdown_s  # + cancel wait
        worker.join(timeout=2)
        assert not worker.is_alive()
        # The export in flight was cancelled by shutdown, not left to its 10 s deadline.
        ((result, done_at),) = results
        assert result is SpanExportResult.FAILURE
        assert done_at - started < waited_s + flush_s + shutdown_s + SLACK_S
        assert exporter.exports_in_flight == 0
        assert (exporter.exported_spans, exporter.failed_spans) == (1, 5)

        t0 = time.monotonic()
        exporter.shutdown(timeout_millis=flush_ms)
        assert time.monotonic() - t0 < 0.01
        print(f"force_flush({flush_ms}) took {flush_s * 1000:.1f} ms; shutdown {shutdown_s:.3f} s")
    finally:
        frozen_broker.thaw()
    gc.collect()
    assert _exporter_threads() == []
    # No asyncio noise in the host's logs: nothing destroyed pending, no unretrieved errors.
    noisy = [
        r.getMessage()
        for r in caplog.records
        if r.name == "asyncio" or "Event loop is closed" in r.getMessage()
    ]
    assert noisy == []


# -- concurrency ----------------------------------------------------------------------------------


async def test_many_threads_exporting_at_once_lose_nothing_and_share_one_producer(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=3)
    exporter = KafkaSpanExporter(kafka_bootstrap, topic)
    threads, per_thread, batch = 16, 10, 5
    spans = _spans(threads * per_thread * batch)
    before = _producers()
    results: list[SpanExportResult] = []
    lock = threading.Lock()
    go = threading.Barrier(threads)

    def work(k: int) -> None:
        go.wait()  # every thread's first export hits the fresh exporter at once
        for j in range(per_thread):
            lo = (k * per_thread + j) * batch
            r = exporter.export(spans[lo : lo + batch])
            with lock:
                results.append(r)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    t0 = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        await asyncio.to_thread(w.join, 60)
    elapsed = time.monotonic() - t0
    assert results == [SpanExportResult.SUCCESS] * (threads * per_thread)
    assert _producers() - before == 1  # one producer, not one per racing thread
    await asyncio.to_thread(exporter.shutdown)
    total = threads * per_thread * batch
    assert (exporter.exported_spans, exporter.failed_spans, exporter.dropped_spans) == (total, 0, 0)
    assert await _count_spans(kafka_bootstrap, topic, total) == total
    print(f"{threads} threads x {per_thread} exports x {batch} spans: {total} in {elapsed:.2f} s")


# -- what is dropped is counted -------------------------------------------------------------------


async def test_oversized_spans_are_dropped_and_counted_exactly(
    kafka_bootstrap: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    small, big = _spans(3), _spans(2, text="x" * 50_000)
    exporter = KafkaSpanExporter(kafka_bootstrap, topic, max_message_bytes=20_000)
    mixed: Sequence[ReadableSpan] = [small[0], big[0], small[1], big[1], small[2]]
    assert await asyncio.to_thread(exporter.export, mixed) is SpanExportResult.FAILURE
    await asyncio.to_thread(exporter.shutdown)
    assert (exporter.exported_spans, exporter.dropped_spans, exporter.failed_spans) == (3, 2, 0)
    assert await _count_spans(kafka_bootstrap, topic, 3) == 3


def test_the_batch_processors_full_queue_counts_exactly_what_it_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The exporter keeps no queue (export waits for acks, within timeout_s); the bounded queue in
    # front of it is the BatchSpanProcessor's, whose drops the SDK counts when asked to.
    monkeypatch.setenv("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "true")
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    exporter = KafkaSpanExporter(f"127.0.0.1:{_closed_port()}", timeout_s=1.0)
    bsp = BatchSpanProcessor(
        exporter,
        max_queue_size=16,
        max_export_batch_size=8,
        schedule_delay_millis=60_000,
        meter_provider=meters,
    )
    provider = TracerProvider(resource=RESOURCE, shutdown_on_exit=False)
    provider.add_span_processor(bsp)

    def processed() -> dict[str, int]:
        out: dict[str, int] = {}
        data = reader.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == "otel.sdk.processor.span.processed":
                        for p in m.data.data_points:
                            key = str((p.attributes or {}).get("error.type", "ok"))
                            out[key] = out.get(key, 0) + int(p.value)  # type: ignore[union-attr]
        return out

    def answer(i: int) -> None:
        record_answer(question=f"q{i}", answer="a", passages=[("p", "t")], tracer_provider=provider)

    for i in range(8):  # one batch: the worker takes it and blocks in export (broker down)
        answer(i)
    deadline = time.monotonic() + 5
    while processed().get("ok", 0) < 8 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert processed() == {"ok": 8}
    for i in range(16 + 10):  # fills the queue, then 10 more
        answer(8 + i)
    assert processed() == {"ok": 8, "queue_full": 10}
    provider.shutdown()
    # Every span accounted for: 8 + 16 handed to the exporter or left queued, 10 counted dropped.
    counts = processed()
    assert counts["queue_full"] == 10
    assert exporter.failed_spans == counts["ok"] - exporter.exported_spans
    assert exporter.exported_spans == 0 and exporter.failed_spans >= 8


# -- the host's process exit ----------------------------------------------------------------------


EXIT_SCRIPT = """
import sys, time
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from citemon_instrumentation import KafkaSpanExporter, record_answer
bootstrap, topic, mode = sys.argv[1:4]
exporter = KafkaSpanExporter(bootstrap, topic, timeout_s=2.0)
if mode == "batch":  # the SDK's atexit hook flushes; the exporter is never shut down by us
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
else:  # no atexit hook at all: only the exporter's daemon thread is left at exit
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
for i in range(5):
    record_answer(question=f"q{i}", answer="a", passages=[("p", "t")], tracer_provider=provider)
print(exporter.exported_spans, time.monotonic(), flush=True)
"""


def _run_exit_script(bootstrap: str, topic: str, mode: str) -> tuple[float, str, str]:
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(EXIT_SCRIPT), bootstrap, topic, mode],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
    )
    elapsed = time.monotonic() - t0
    assert done.returncode == 0, done.stderr
    return elapsed, done.stdout, done.stderr


@pytest.mark.parametrize("mode", ["simple", "batch"])
async def test_the_exporter_never_keeps_the_process_alive(
    kafka_bootstrap: str, kafka_topic: TopicFactory, mode: str
) -> None:
    topic = await kafka_topic(partitions=1)
    elapsed, out, err = await asyncio.to_thread(_run_exit_script, kafka_bootstrap, topic, mode)
    assert elapsed < 5.0, elapsed
    assert "Traceback" not in err, err
    assert await _count_spans(kafka_bootstrap, topic, 5) == 5  # and nothing was lost on the way
    print(f"{mode}: exited in {elapsed:.2f} s; stdout {out.split()}")


def test_the_exporter_never_keeps_the_process_alive_with_the_broker_down() -> None:
    elapsed, _, err = _run_exit_script(f"127.0.0.1:{_closed_port()}", "t", "batch")
    # The atexit flush spends at most timeout_s (2 s) on the dead broker, then the process goes.
    assert elapsed < 2.0 + 3.0, elapsed
    assert "Traceback" not in err, err
