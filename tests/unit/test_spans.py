"""OTLP decoding, bad payloads, OpenInference trace assembly and OTLP JSON-lines files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citemon._core.errors import DecodeError
from citemon._core.records import AnswerRecord
from citemon._otlp.assembly import TraceAssembler
from citemon._otlp.decoding import decode_otlp, decode_otlp_json, decode_otlp_proto
from citemon._otlp.files import is_otlp_json_line, iter_otlp_json_lines
from citemon_instrumentation import record_answer
from tests.otlp_json import otlp_json

RESOURCE = Resource.create(
    {"service.name": "bot", "service.version": "v7", "deployment.environment": "staging"}
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def otel() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def proto(spans: Sequence[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializeToString()


def reason(payload: bytes | str, *, json_path: bool = False, **kw: Any) -> str:
    with pytest.raises(DecodeError) as err:
        if json_path:
            decode_otlp_json(payload, **kw)
        else:
            decode_otlp_proto(payload, **kw)  # type: ignore[arg-type]
    return err.value.reason


def answer_payload(provider: TracerProvider, exporter: InMemorySpanExporter, **attrs: Any) -> bytes:
    span = provider.get_tracer("t").start_span("rag.answer", attributes=attrs)
    span.end()
    return proto(exporter.get_finished_spans())


# -- self-contained answers ---------------------------------------------------------------------


def test_proto_and_json_decode_to_the_same_record(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = otel
    record_answer(
        question="q?",
        answer="It is 90 days. [p-1]",
        passages=[{"id": "p-1", "text": "90 days", "score": 0.9}],
        tracer_provider=provider,
    )
    (span,) = exporter.get_finished_spans()
    payload = proto(exporter.get_finished_spans())
    (from_proto,) = decode_otlp_proto(payload).records
    (from_json,) = decode_otlp_json(otlp_json(payload)).records
    (sniffed,) = decode_otlp(otlp_json(payload).encode()).records
    assert from_proto == from_json == sniffed
    assert from_proto.trace_id == f"{span.context.trace_id:032x}"
    assert from_proto.id == from_proto.span_id == f"{span.context.span_id:016x}"
    assert (from_proto.service, from_proto.version, from_proto.environment) == (
        "bot",
        "v7",
        "staging",
    )
    assert from_proto.passages[0].score == 0.9


def test_dropped_attributes_mark_the_record_truncated() -> None:
    exporter = InMemorySpanExporter()
    from opentelemetry.sdk.trace import SpanLimits

    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=6))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("t").start_span("rag.answer")
    # A hand-rolled span that ignores the limits: the SDK silently evicts the oldest attributes.
    span.set_attributes({f"retrieval.documents.{i}.document.content": "t" for i in range(5)})
    span.set_attributes({"output.value": "a", "input.value": "q"})
    span.end()
    (record,) = decode_otlp_proto(proto(exporter.get_finished_spans())).records
    assert record.truncated


def test_a_mixed_batch_keeps_the_good_answers(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = otel
    tracer = provider.get_tracer("t")
    good = tracer.start_span(
        "rag.answer",
        attributes={"output.value": "a", "retrieval.documents.0.document.content": "x"},
    )
    good.end()
    bad = tracer.start_span("rag.answer", attributes={"output.value": 42})
    bad.end()
    batch = decode_otlp_proto(proto(exporter.get_finished_spans()))
    assert len(batch.records) == 1 and batch.records[0].passages[0].id == "1"
    assert [e.reason for e in batch.errors] == ["bad_attribute"]


# -- bad payloads -------------------------------------------------------------------------------


def test_not_protobuf() -> None:
    assert reason(b"\xff\xfe\x00 certainly not protobuf") == "not_protobuf"
    with pytest.raises(DecodeError, match="looks like JSON"):
        decode_otlp_proto(b'{"resourceSpans": []}')


def test_wrong_message_types() -> None:
    logs = ExportLogsServiceRequest()
    log = logs.resource_logs.add().scope_logs.add().log_records.add()
    log.time_unix_nano, log.body.string_value = 5, "hello"
    assert reason(logs.SerializeToString()) == "wrong_message"
    metrics = ExportMetricsServiceRequest()
    metric = metrics.resource_metrics.add().scope_metrics.add().metrics.add()
    metric.name = "requests"
    metric.gauge.data_points.add().as_double = 1.0
    assert reason(metrics.SerializeToString()) == "wrong_message"
    assert reason('{"resourceLogs": []}', json_path=True) == "wrong_message"
    assert reason("[1, 2]", json_path=True) == "wrong_message"


def test_valid_otlp_without_answer_spans(otel: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = otel
    with provider.get_tracer("t").start_as_current_span("GET /health"):
        provider.get_tracer("t").start_span("db.query").end()
    payload = proto(exporter.get_finished_spans()[:1])  # the child alone: no root, no answer
    assert reason(payload) == "no_answer_spans"
    assert reason(b"") == "no_answer_spans"


def test_missing_and_mistyped_attributes(otel: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = otel
    assert reason(answer_payload(provider, exporter, **{"input.value": "q"})) == "bad_attribute"
    exporter.clear()
    assert reason(answer_payload(provider, exporter, **{"output.value": 3.5})) == "bad_attribute"
    exporter.clear()
    payload = answer_payload(
        provider, exporter, **{"output.value": "a", "retrieval.documents.0.document.content": 12}
    )
    assert reason(payload) == "bad_attribute"
    exporter.clear()
    payload = answer_payload(
        provider, exporter, **{"output.value": "a", "citemon.passages.overflow": "{nope"}
    )
    assert reason(payload) == "bad_attribute"


def test_ten_thousand_passages() -> None:
    # Built directly: the SDK's attribute limit would never let 10,000 documents onto a span.
    req = ExportTraceServiceRequest()
    span = req.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "rag.answer"
    for key in ["output.value"] + [
        f"retrieval.documents.{i}.document.content" for i in range(10_000)
    ]:
        kv = span.attributes.add()
        kv.key, kv.value.string_value = key, "t"
    payload = req.SerializeToString()
    assert reason(payload) == "too_many_passages"
    assert reason(otlp_json(payload), json_path=True) == "too_many_passages"
    assert len(decode_otlp_proto(payload, max_passages=10_000).records[0].passages) == 10_000


def test_five_megabyte_answer(otel: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = otel
    payload = answer_payload(provider, exporter, **{"output.value": "é" * 2_500_000})
    assert reason(payload) == "answer_too_large"
    assert reason(otlp_json(payload), json_path=True) == "answer_too_large"


def test_invalid_utf8(otel: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = otel
    payload = bytearray(answer_payload(provider, exporter, **{"output.value": "ZZZZ answer"}))
    at = payload.find(b"ZZZZ")
    payload[at : at + 2] = b"\xff\xfe"
    assert reason(bytes(payload)) == "invalid_utf8"
    exporter.clear()
    text = otlp_json(answer_payload(provider, exporter, **{"output.value": "ZZZZ"}))
    assert reason(text.replace("ZZZZ", "\\ud800").encode(), json_path=True) == "invalid_utf8"
    assert reason(b'{"resourceSpans": "\xff"}', json_path=True) == "invalid_utf8"


def test_not_json_and_bad_ids() -> None:
    assert reason("{not json", json_path=True) == "not_json"
    line = {
        "resourceSpans": [
            {"scopeSpans": [{"spans": [{"traceId": "xyz", "spanId": "00", "name": "rag.answer"}]}]}
        ]
    }
    assert reason(json.dumps(line), json_path=True) == "bad_id"


# -- OpenInference two-span traces ---------------------------------------------------------------


def oi_trace(provider: TracerProvider, *, root: bool = True, condense: bool = False) -> None:
    """A LlamaIndex-shaped trace: query (CHAIN) → [condense LLM] → retrieve → synthesize LLM."""
    tracer = provider.get_tracer("oi")
    with (
        tracer.start_as_current_span(
            "query", attributes={"openinference.span.kind": "CHAIN", "input.value": "how long?"}
        )
        if root
        else _nothing() as q
    ):
        if condense:
            tracer.start_span(
                "condense",
                attributes={"openinference.span.kind": "LLM", "output.value": "rewritten question"},
            ).end()
        tracer.start_span(
            "retrieve",
            attributes={
                "openinference.span.kind": "RETRIEVER",
                "input.value": "how long?",
                "retrieval.documents.0.document.id": "n-1",
                "retrieval.documents.0.document.content": "90 days",
                "retrieval.documents.0.document.score": 0.7,
                "retrieval.documents.1.document.content": "no id here",
                "retrieval.documents.1.document.metadata": '{"doc_id": "d-9"}',
            },
        ).end()
        tracer.start_span(
            "synthesize",
            attributes={"openinference.span.kind": "LLM", "output.value": "Kept 90 days [n-1]"},
        ).end()
        if q is not None:
            q.set_attribute("output.value", "Kept 90 days [n-1]")


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_two_span_trace_in_one_message(otel: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = otel
    oi_trace(provider)
    batch = decode_otlp_proto(proto(exporter.get_finished_spans()))
    assert batch.records == []
    assembler = TraceAssembler()
    (record,) = assembler.add(batch.spans)
    assert record.answer == "Kept 90 days [n-1]"
    assert record.question == "how long?"
    assert [(p.id, p.text) for p in record.passages] == [("n-1", "90 days"), ("d-9", "no id here")]
    root = exporter.get_finished_spans()[-1]
    assert record.span_id == f"{root.context.span_id:016x}" and record.service == "bot"
    assert (assembler.completed, len(assembler)) == (1, 0)


def test_trace_split_across_messages_in_any_order(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = otel
    oi_trace(provider, condense=True)
    spans = exporter.get_finished_spans()  # condense, retrieve, synthesize, root
    for order in ((2, 0, 1, 3), (3, 0, 1, 2), (1, 3, 2, 0), (3, 2, 1, 0)):
        assembler = TraceAssembler()
        out: list[AnswerRecord] = []
        for i in order:
            out += assembler.add(decode_otlp_proto(proto([spans[i]])).spans)
        (record,) = out
        assert record.answer == "Kept 90 days [n-1]", order
        assert len(record.passages) == 2
        assert len(assembler) == 0 and assembler.completed == 1


def test_rootless_trace_is_settled_by_the_window_and_answer_follows_retrieval(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = otel
    with provider.get_tracer("http").start_as_current_span("POST /chat"):
        oi_trace(provider, root=False, condense=True)
    spans = exporter.get_finished_spans()[:-1]  # the HTTP root lives elsewhere, never arrives
    clock = Clock()
    assembler = TraceAssembler(window_s=5, clock=clock)
    assert assembler.add(decode_otlp_proto(proto(spans)).spans) == []
    clock.now = 4.9
    assert assembler.expire() == 0 and assembler.take_ready() == []
    clock.now = 5.0
    assert assembler.expire() == 0
    (record,) = assembler.add([])
    assert record.answer == "Kept 90 days [n-1]"  # not the condense step's "rewritten question"
    assert assembler.settled == 1


def test_incomplete_trace_is_dropped_and_counted(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = otel
    oi_trace(provider)
    retriever = exporter.get_finished_spans()[0]
    clock = Clock()
    assembler = TraceAssembler(window_s=5, clock=clock)
    assembler.add(decode_otlp_proto(proto([retriever])).spans)
    assert len(assembler) == 1 and assembler.nbytes > 0
    clock.now = 6
    assert assembler.expire() == 1
    assert (len(assembler), assembler.nbytes, assembler.dropped_incomplete) == (0, 0, 1)


def test_memory_caps_bound_the_buffer(otel: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = otel
    for _ in range(5):
        oi_trace(provider)
    retrievers = [s for s in exporter.get_finished_spans() if s.name == "retrieve"]
    assembler = TraceAssembler(max_traces=3)
    for s in retrievers:
        assembler.add(decode_otlp_proto(proto([s])).spans)
    assert len(assembler) == 3 and assembler.evicted == 2 and assembler.dropped_incomplete == 2
    by_bytes = TraceAssembler(max_bytes=500)
    for s in retrievers:
        by_bytes.add(decode_otlp_proto(proto([s])).spans)
    assert by_bytes.nbytes <= 500 and by_bytes.evicted >= 3


def test_a_shim_answer_supersedes_openinference_parts(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = otel
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("rag.answer") as outer:
        oi_trace(provider)
        outer.set_attributes({"output.value": "a", "retrieval.documents.0.document.content": "x"})
    *inner, answer = exporter.get_finished_spans()
    assembler = TraceAssembler()
    assert assembler.add(decode_otlp_proto(proto(inner)).spans) == []  # root is rag.answer
    batch = decode_otlp_proto(proto([answer]))
    assert len(batch.records) == 1
    assert assembler.add(batch.spans) == [] and len(assembler) == 0 and assembler.superseded == 1


# -- files --------------------------------------------------------------------------------------


def test_otlp_json_lines_file(
    tmp_path: Path, otel: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = otel
    record_answer(question="q", answer="a [p-1]", passages=[("p-1", "t")], tracer_provider=provider)
    shim_line = otlp_json(proto(exporter.get_finished_spans()))
    exporter.clear()
    oi_trace(provider)
    first, *rest = exporter.get_finished_spans()
    exporter.clear()
    provider.get_tracer("t").start_span("GET /health").end()
    health_line = otlp_json(proto(exporter.get_finished_spans()))
    path = tmp_path / "spans.jsonl"
    path.write_text(
        "\n".join(
            [
                shim_line,
                "",
                "{broken",
                otlp_json(proto([first])),
                health_line,
                otlp_json(proto(rest)),
            ]
        )
        + "\n"
    )
    assert is_otlp_json_line(shim_line) and not is_otlp_json_line('{"id": "a-1"}')
    got = list(iter_otlp_json_lines(path))
    assert [(n, type(x).__name__) for n, x in got] == [
        (1, "AnswerRecord"),
        (3, "DecodeError"),
        (6, "AnswerRecord"),
        # GET /health: a trace that ended with nothing any dialect reads, said once the file
        # is over (the rest of a trace whose root came first may follow later in the file)
        (6, "NoAnswer"),
    ]
    assert isinstance(got[1][1], DecodeError) and got[1][1].reason == "not_json"
    assert isinstance(got[2][1], AnswerRecord) and got[2][1].answer == "Kept 90 days [n-1]"


def test_uppercase_hex_ids_come_out_lowercase(
    otel: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = otel
    record_answer(question="q", answer="a", passages=[], tracer_provider=provider)
    (span,) = exporter.get_finished_spans()
    obj = json.loads(otlp_json(proto([span])))
    sp = obj["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    sp["traceId"], sp["spanId"] = sp["traceId"].upper(), sp["spanId"].upper()
    (record,) = decode_otlp_json(json.dumps(obj)).records
    assert record.trace_id == f"{span.context.trace_id:032x}"
    assert record.id == record.span_id == f"{span.context.span_id:016x}"
