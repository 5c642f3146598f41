"""Verdicts back on the trace, for real: ``citemon run --evaluation-events`` → OTLP → the
project's Collector (``make collector``, the shipped config's logs pipeline) → Kafka.

The service's spans take the same Collector in; the monitor is ``citemon run`` as a process with
the specimen's judgement; the events are read back from the Collector's logs topic as the
``ExportLogsServiceRequest`` it writes and matched to the answer spans by trace and span ID. The
second test holds the OTLP endpoint's every request (a real HTTP server on loopback that does
not answer until told to): scoring and commits go on regardless, and every event is counted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from citemon.core.records import AnswerRecord
from citemon.demo.data import specimen
from citemon.engine.scoring import Scorer
from citemon.service.evaluation_events import (
    ACCURACY,
    EVENT_NAME,
    FAITHFULNESS,
    evaluation_events,
)
from citemon_instrumentation import answer_span
from tests.integration.collector_support import (
    collector_binary,
    fully_committed,
    metric_samples,
    run_collector,
    total,
)
from tests.integration.conftest import TopicFactory
from tests.integration.monitor_support import (
    expected_verdicts,
    metric_sum,
    publish,
    ready,
    run_monitor,
    settings_for,
    start_process,
    verdicts_by_version,
    wait_for,
)
from tests.integration.prometheus_support import free_port
from tests.oracles import specimen_judge

SERVICE = "events-bot"
DONE_TIMEOUT_S = 60.0

# Both claims cite the passage that says them: accuracy 1.0 (beside the specimen's 0.33).
ALL_CORRECT = (
    "Audit logs are retained for 90 days on the Business plan. [p-3310] "
    "Changing it is not possible from the dashboard. [p-3311]"
)


@pytest.fixture(scope="module")
def otelcol() -> Path:
    return collector_binary()


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _serve(endpoint: str, records: list[AnswerRecord]) -> list[tuple[str, str]]:
    """The shim's ``answer_span`` per record, exported over OTLP/HTTP; the spans' IDs (hex)."""
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint), schedule_delay_millis=100)
    )
    ids = []
    for record in records:
        with answer_span(record.question, tracer_provider=provider) as span:
            span.set_passages([{"id": p.id, "text": p.text} for p in record.passages])
            span.set_answer(record.answer)
            ctx = span.span.get_span_context()
            ids.append((f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"))
    assert provider.force_flush(30_000), "the OTLP span exporter did not flush"
    provider.shutdown()
    return ids


async def _read_all(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Every record of ``topic`` up to its end offsets (taken first: nothing writes it now)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[Any] = []
        async with asyncio.timeout(DONE_TIMEOUT_S):
            while any([await consumer.position(tp) < ends[tp] for tp in tps]):
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    out.extend(batch)
        return out
    finally:
        await consumer.stop()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_events_reach_kafka_through_the_collector_on_each_answer_span(
    otelcol: Path, kafka_bootstrap: str, kafka_topic: TopicFactory, tmp_path: Path, protocol: str
) -> None:
    spans_topic = await kafka_topic(partitions=3)
    logs_topic = await kafka_topic(partitions=3)
    answers = [specimen(), specimen(), specimen().model_copy(update={"answer": ALL_CORRECT})]
    port = free_port()
    flags = [
        "--bootstrap-servers", kafka_bootstrap, "--topic", spans_topic,
        "--group", f"g.{spans_topic}", "--dlq-topic", f"{spans_topic}.dlq",
        "--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--commit-interval", "0.2",
        "--budget-per-minute", "0", "--judge", "tests.oracles:specimen_judge",
        "--evaluation-events",
    ]  # fmt: skip
    with run_collector(
        otelcol, tmp_path, kafka_bootstrap, spans_topic, logs_topic=logs_topic
    ) as collector:
        ids = _serve(collector.http_endpoint, answers)
        endpoint = (
            f"http://{collector.grpc_endpoint}" if protocol == "grpc" else collector.http_base
        )
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
        proc = start_process(flags, env=env, log_path=tmp_path / "run.log")
        try:
            await wait_for(lambda: ready(port), 30, "the monitor to be ready")

            def count(name: str, **labels: str) -> float:
                return total(metric_samples(port), name, **labels)

            await wait_for(
                lambda: count("citemon_answers_total") >= len(answers), DONE_TIMEOUT_S, "answers"
            )
            await wait_for(
                lambda: count("citemon_evaluation_events_total", outcome="sent") >= 2 * len(ids),
                DONE_TIMEOUT_S,
                "every event accepted by the Collector",
            )
            samples = await asyncio.to_thread(metric_samples, port)
        finally:
            proc.terminate()
            rc = await asyncio.to_thread(proc.wait, 30)
        assert rc == 0, (tmp_path / "run.log").read_text()[-3000:]
    # The Collector flushed its queue to Kafka when it stopped (SIGTERM).
    assert total(samples, "citemon_answers_total") == len(answers)
    events = {o: total(samples, "citemon_evaluation_events_total", outcome=o) for o in
              ("sent", "dropped", "failed")}  # fmt: skip
    assert events == {"sent": 6, "dropped": 0, "failed": 0}

    messages = await _read_all(kafka_bootstrap, logs_topic, 3)
    got: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for message in messages:
        request = ExportLogsServiceRequest.FromString(message.value)
        for resource_logs in request.resource_logs:
            resource = {a.key: _value(a.value) for a in resource_logs.resource.attributes}
            assert resource["service.name"] == "citemon"
            for scope_logs in resource_logs.scope_logs:
                for rec in scope_logs.log_records:
                    assert rec.event_name == EVENT_NAME
                    key = (rec.trace_id.hex(), rec.span_id.hex())
                    assert message.key == key[0].encode()  # keyed by trace ID, like the spans
                    attributes = {a.key: _value(a.value) for a in rec.attributes}
                    name = attributes["gen_ai.evaluation.name"]
                    assert name not in got.get(key, {}), f"{name} twice for {key}"
                    got.setdefault(key, {})[name] = attributes
    assert set(got) == set(ids)  # one pair per answer span, on its own trace and span ID
    assert all(set(pair) == {ACCURACY, FAITHFULNESS} for pair in got.values())

    scorer = Scorer(specimen_judge())
    for (trace_id, span_id), record in zip(ids, answers, strict=True):
        accuracy, faithfulness = (
            got[(trace_id, span_id)][ACCURACY],
            got[(trace_id, span_id)][FAITHFULNESS],
        )
        assert faithfulness["gen_ai.evaluation.score.value"] == 1.0
        assert faithfulness["gen_ai.evaluation.score.label"] == "pass"
        if record.answer == ALL_CORRECT:
            assert accuracy["gen_ai.evaluation.score.value"] == 1.0
            assert accuracy["gen_ai.evaluation.score.label"] == "pass"
            assert accuracy["citemon.verdicts.correct"] == 2
        else:  # the specimen: one correct claim, two misattributed
            assert accuracy["gen_ai.evaluation.score.value"] == 1 / 3
            assert accuracy["gen_ai.evaluation.score.label"] == "fail"
            assert accuracy["citemon.verdicts.correct"] == 1
            assert accuracy["citemon.verdicts.misattributed"] == 2
        # Exactly what the same judge's offline score says, explanation and counts included.
        offline = evaluation_events(await scorer.score(record), span_id)
        assert [accuracy, faithfulness] == [e.attributes for e in offline]


class _HeldEndpoint:
    """An OTLP/HTTP endpoint on loopback that holds every request until :meth:`release`, then
    refuses it with 400 (not retryable: the export fails at once)."""

    def __init__(self) -> None:
        held = self
        self.requests = 0
        self.released = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                held.requests += 1
                held.released.wait(DONE_TIMEOUT_S)
                self.send_response(400)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def release(self) -> None:
        self.released.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def held_endpoint() -> Iterator[_HeldEndpoint]:
    endpoint = _HeldEndpoint()
    try:
        yield endpoint
    finally:
        endpoint.close()


async def test_a_stuck_otlp_endpoint_never_delays_scoring_or_commits(
    kafka_bootstrap: str,
    kafka_topic: TopicFactory,
    held_endpoint: _HeldEndpoint,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Queue of 4 and an endpoint that answers nothing: every answer is scored, counted and
    committed while the first export hangs; 4 events wait and fail when the endpoint gives up,
    the other 2N - 4 are dropped, each counted once."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", held_endpoint.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", str(DONE_TIMEOUT_S))
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    topic = await kafka_topic(partitions=3)
    sent = await asyncio.to_thread(publish, kafka_bootstrap, topic, [("v1", 12, False)])
    n = len(sent)
    expected = await expected_verdicts(sent)
    settings = settings_for(
        kafka_bootstrap, topic, evaluation_events=True, evaluation_events_max_queue=4
    )
    async with run_monitor(settings) as m:

        def events(outcome: str) -> float:
            return metric_sum(m.registry, "citemon_evaluation_events_total", outcome=outcome)

        await wait_for(
            lambda: metric_sum(m.registry, "citemon_answers_total") >= n, DONE_TIMEOUT_S, "answers"
        )
        deadline = asyncio.get_running_loop().time() + DONE_TIMEOUT_S
        while not await fully_committed(kafka_bootstrap, topic, f"g.{topic}", 3):
            assert asyncio.get_running_loop().time() < deadline, "the topic was not committed"
            await asyncio.sleep(0.2)
        await wait_for(lambda: held_endpoint.requests >= 1, DONE_TIMEOUT_S, "the first export")
        # Everything scored and committed while the first export still hangs on the endpoint.
        assert metric_sum(m.registry, "citemon_answers_total") == n
        assert verdicts_by_version(m.registry) == expected
        assert (events("sent"), events("failed"), events("dropped")) == (0, 0, 2 * n - 4)
        held_endpoint.release()
        await wait_for(lambda: events("failed") == 4, DONE_TIMEOUT_S, "the held events to fail")
        assert (events("sent"), events("dropped")) == (0, 2 * n - 4)
