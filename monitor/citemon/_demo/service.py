"""A small synthetic RAG service for the demo, the tests and the benchmark.

It answers questions about the help centre of :mod:`citemon._demo.data` and records every answer
the way a real service would: with the OpenTelemetry shim
(:func:`citemon_instrumentation.record_answer`) into a ``TracerProvider`` whose resource names the
deploy (``service.version``), exported by
:class:`citemon_instrumentation.KafkaSpanExporter` to the spans topic. :meth:`FakeRAGService.deploy`
switches versions; ``first_passage_bug=True`` is the attribution bug the demo ships as ``v2``
(every claim cites the first retrieved passage).

:func:`otlp_template` and :func:`with_trace_id` make raw OTLP payloads cheaply for load
(encode once, patch the trace ID per message), so a benchmark can queue 200,000 answers in
seconds.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Final

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citemon._core.records import AnswerRecord
from citemon._demo.data import QUESTIONS, answer
from citemon._demo.review import OVERLAP_CHUNKS, fused_answer, overlap_answer
from citemon_instrumentation import KafkaSpanExporter, record_answer

__all__ = [
    "DEMO_SERVICE",
    "V1_FAULTS",
    "FakeRAGService",
    "otlp_template",
    "with_trace_id",
]

DEMO_SERVICE: Final = "support-bot"

V1_FAULTS: Final[tuple[tuple[str, float], ...]] = (
    ("correct", 0.82),
    ("misattributed", 0.08),
    ("uncited", 0.05),
    ("over_broad", 0.05),
)
"""v1's mix: mostly correct citations, with the faults a real model makes now and then."""


def _resource(version: str, environment: str, service: str) -> Resource:
    return Resource.create(
        {
            "service.name": service,
            "service.version": version,
            "deployment.environment.name": environment,
        }
    )


class FakeRAGService:
    """Answers from the sample help centre and ships each answer's span to Kafka.

    ``exporter`` overrides the Kafka exporter (a test may pass an in-memory one);
    ``exporter_factory`` makes a fresh one per deploy instead (the demo's OTLP exporter to a
    Collector); ``batch_delay_ms`` is the span processor's export interval. Thread-safe: one
    lock serialises :meth:`handle` and :meth:`deploy`.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        service: str = DEMO_SERVICE,
        environment: str = "demo",
        seed: int = 0,
        batch_delay_ms: int = 200,
        exporter: SpanExporter | None = None,
        exporter_factory: Callable[[], SpanExporter] | None = None,
        ids_only: bool = False,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.ids_only = ids_only
        """Trace each document by ID alone, no text (``citemon demo --ids-only``)."""
        self.topic = topic
        self.service = service
        self.environment = environment
        self.batch_delay_ms = batch_delay_ms
        self._exporter = exporter
        self._exporter_factory = exporter_factory
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._provider: TracerProvider | None = None
        self._retired: list[TracerProvider] = []  # earlier deploys', shut down at the end
        self.version: str | None = None
        self.first_passage_bug = False
        self.faults: Sequence[tuple[str, float]] = V1_FAULTS
        self.answered: dict[str, int] = {}

    def deploy(
        self,
        version: str,
        *,
        first_passage_bug: bool = False,
        faults: Sequence[tuple[str, float]] = V1_FAULTS,
    ) -> None:
        """Roll out ``version``: new answers carry it in ``service.version``."""
        with self._lock:
            old = self._provider
            if self._exporter is not None:
                exporter = self._exporter
            elif self._exporter_factory is not None:
                exporter = self._exporter_factory()
            else:
                exporter = KafkaSpanExporter(self.bootstrap_servers, self.topic)
            provider = TracerProvider(resource=_resource(version, self.environment, self.service))
            provider.add_span_processor(
                BatchSpanProcessor(
                    exporter, schedule_delay_millis=self.batch_delay_ms, max_queue_size=65_536
                )
            )
            self._provider = provider
            if old is not None:
                self._retired.append(old)
            self.version = version
            self.first_passage_bug = first_passage_bug
            self.faults = faults
        if old is not None:
            old.force_flush()

    def _fault(self) -> str:
        r = self._rng.random()
        for name, share in self.faults:
            r -= share
            if r < 0:
                return name
        return self.faults[0][0]

    def handle(self) -> AnswerRecord:
        """Answer one random question and record its span; returns the answer as sent."""
        with self._lock:
            if self._provider is None or self.version is None:
                raise RuntimeError("deploy() a version first")
            question = self._rng.choice(QUESTIONS)
            rid = f"{self.version}-{sum(self.answered.values()) + 1}"
            fault = self._fault()
            labels = {
                "service": self.service,
                "version": self.version,
                "environment": self.environment,
            }
            bug = self.first_passage_bug
            if fault == "overlap":  # the checker faults of the review demo (demo/review.py)
                index = self._rng.choice(sorted(OVERLAP_CHUNKS))
                record = overlap_answer(index, rid, first_passage_bug=bug, **labels)
            elif fault == "fused":
                record = fused_answer(question, rid, first_passage_bug=bug, **labels)
            else:
                record = answer(question, fault, rid, first_passage_bug=bug, **labels)
            record_answer(
                question=record.question,
                answer=record.answer,
                passages=[
                    {
                        "id": p.id,
                        "text": "" if self.ids_only else p.text,
                        "metadata": {"source": p.source},
                    }
                    for p in record.passages
                ],
                tracer_provider=self._provider,
            )
            self.answered[self.version] = self.answered.get(self.version, 0) + 1
            return record

    def flush(self, timeout_ms: int = 30_000) -> bool:
        provider = self._provider
        return provider.force_flush(timeout_ms) if provider is not None else True

    def shutdown(self) -> None:
        with self._lock:
            provider, self._provider = self._provider, None
            retired, self._retired = self._retired, []
        # Each provider shuts down its span processor, which flushes and shuts its exporter:
        # every exporter once (twice makes the OTLP exporters warn).
        for each in ([provider] if provider is not None else []) + retired:
            each.shutdown()


def otlp_template(
    record: AnswerRecord, *, version: str = "v1", service: str = DEMO_SERVICE
) -> tuple[bytes, bytes]:
    """One answer span encoded as an OTLP ``ExportTraceServiceRequest``, and its trace ID
    bytes (16), for :func:`with_trace_id` to patch."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=_resource(version, "bench", service))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    record_answer(
        question=record.question,
        answer=record.answer,
        passages=[{"id": p.id, "text": p.text} for p in record.passages],
        tracer_provider=provider,
    )
    provider.shutdown()
    (span,) = memory.get_finished_spans()
    assert span.context is not None
    trace_id = span.context.trace_id.to_bytes(16, "big")
    payload = encode_spans([span]).SerializeToString()
    if payload.count(trace_id) != 1:
        raise RuntimeError("trace ID not found exactly once in the payload")
    return payload, trace_id


def with_trace_id(template: tuple[bytes, bytes], trace_id: int) -> tuple[bytes, bytes]:
    """``(key, value)`` of a copy of the template answer under another trace ID."""
    payload, old = template
    new = trace_id.to_bytes(16, "big")
    return new.hex().encode(), payload.replace(old, new, 1)
