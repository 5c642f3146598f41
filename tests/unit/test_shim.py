"""The shim against the real OpenTelemetry SDK with an ``InMemorySpanExporter``."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from langchain_core.documents import Document
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

from citemon._core.errors import DecodeError
from citemon._core.records import AnswerRecord, Passage
from citemon._otlp.decoding import decode_otlp_proto
from citemon_instrumentation import ShimStats, answer_span, record_answer

RESOURCE = Resource.create(
    {
        "service.name": "support-bot",
        "service.version": "2026.11.3",
        "deployment.environment.name": "prod",
    }
)


def _provider(**kwargs: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE, **kwargs)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _decode(spans: tuple[ReadableSpan, ...]) -> list[AnswerRecord]:
    return decode_otlp_proto(encode_spans(spans).SerializeToString()).records


class Doc(BaseModel):
    id: str
    text: str
    score: float | None = None


def test_attributes_exactly_as_the_contract_says() -> None:
    provider, exporter = _provider()
    stats = ShimStats()
    with answer_span("How long are audit logs kept?", tracer_provider=provider, stats=stats) as s:
        s.set_passages(
            [
                {"id": "p-3310", "text": "Retention is 90 days.", "score": 0.82, "source": "a.md"},
                ("p-3311", "Contact your account manager."),
            ]
        )
        s.set_answer("Audit logs are kept 90 days. [p-3310]")
    (span,) = exporter.get_finished_spans()
    assert span.name == "rag.answer"
    assert dict(span.attributes or {}) == {
        "openinference.span.kind": "CHAIN",
        "input.value": "How long are audit logs kept?",
        "output.value": "Audit logs are kept 90 days. [p-3310]",
        "retrieval.documents.0.document.id": "p-3310",
        "retrieval.documents.0.document.content": "Retention is 90 days.",
        "retrieval.documents.0.document.score": 0.82,
        "retrieval.documents.0.document.metadata": '{"source": "a.md"}',
        "retrieval.documents.1.document.id": "p-3311",
        "retrieval.documents.1.document.content": "Contact your account manager.",
        "citemon.passages.count": 2,
        "citemon.truncated": False,
    }
    assert span.resource.attributes["service.version"] == "2026.11.3"
    assert (stats.answers, stats.errors, stats.truncated) == (1, 0, 0)

    (record,) = _decode(exporter.get_finished_spans())
    assert record == AnswerRecord(
        id=f"{span.context.span_id:016x}",
        question="How long are audit logs kept?",
        answer="Audit logs are kept 90 days. [p-3310]",
        passages=[
            Passage(
                id="p-3310",
                text="Retention is 90 days.",
                source="a.md",
                score=0.82,
                metadata={"source": "a.md"},
            ),
            Passage(id="p-3311", text="Contact your account manager."),
        ],
        service="support-bot",
        version="2026.11.3",
        environment="prod",
        trace_id=f"{span.context.trace_id:032x}",
        span_id=f"{span.context.span_id:016x}",
        truncated=False,
    )


def test_passage_shapes_dict_model_pair_and_langchain_document() -> None:
    provider, exporter = _provider()
    record_answer(
        question="q",
        answer="a [x]",
        passages=[
            {"id": 7, "content": "dict with content"},
            Doc(id="m-1", text="pydantic", score=0.5),
            ("t-1", "pair"),
            Document(page_content="langchain", id="lc-1", metadata={"source": "s.md"}),
            Document(page_content="no id at all"),
        ],
        tracer_provider=provider,
    )
    (record,) = _decode(exporter.get_finished_spans())
    assert [(p.id, p.text, p.score, p.source) for p in record.passages] == [
        ("7", "dict with content", None, None),
        ("m-1", "pydantic", 0.5, None),
        ("t-1", "pair", None, None),
        ("lc-1", "langchain", None, "s.md"),
        ("5", "no id at all", None, None),  # positional, as numeric citation markers resolve
    ]


def test_redaction_applies_to_question_answer_and_every_passage() -> None:
    provider, exporter = _provider(span_limits=SpanLimits(max_span_attributes=20))

    def redact(text: str) -> str:
        return text.replace("alice@example.com", "[email]")

    passages = [(f"p-{i}", f"mail alice@example.com about {i}") for i in range(10)]
    record_answer(
        question="what did alice@example.com ask?",
        answer="She asked alice@example.com things. [p-1]",
        passages=passages,
        tracer_provider=provider,
        redact=redact,
    )
    (span,) = exporter.get_finished_spans()
    # Some passages went inline, the rest into the packed overflow: all redacted.
    assert "citemon.passages.overflow" in (span.attributes or {})
    assert "alice@example.com" not in json.dumps(dict(span.attributes or {}))
    (record,) = _decode(exporter.get_finished_spans())
    assert record.question == "what did [email] ask?"
    assert record.answer == "She asked [email] things. [p-1]"
    assert [p.text for p in record.passages] == [f"mail [email] about {i}" for i in range(10)]
    assert not record.truncated


def test_a_failing_redact_hook_never_reaches_the_host_and_records_nothing_raw(
    caplog: pytest.LogCaptureFixture,
) -> None:
    provider, exporter = _provider()
    stats = ShimStats()

    def broken(text: str) -> str:
        raise RuntimeError(f"redactor down on {text!r}")  # quotes the very text it was given

    caplog.set_level(logging.WARNING, logger="citemon_instrumentation")
    handled = []
    with answer_span("secret question", tracer_provider=provider, redact=broken, stats=stats) as s:
        s.set_passages([("p-1", "secret passage")])
        s.set_answer("secret answer [p-1]")
        handled.append("host went on")
    assert handled == ["host went on"]
    (span,) = exporter.get_finished_spans()
    assert "secret" not in json.dumps(dict(span.attributes or {}))
    assert span.attributes is not None
    assert span.attributes["citemon.redaction_failed"] is True
    assert span.attributes["citemon.truncated"] is True
    assert stats.redact_errors == 3  # question, passage, answer
    assert stats.truncated == 1
    # Logged once (rate-limited), and never with the text it was redacting.
    lines = [r.getMessage() for r in caplog.records if "redact" in r.getMessage()]
    assert len(lines) == 1 and "secret" not in lines[0]
    assert "RuntimeError" in lines[0]
    (record,) = _decode(exporter.get_finished_spans())
    assert record.truncated and record.answer == ""


def test_fifty_passages_round_trip_under_default_limits() -> None:
    provider, exporter = _provider()
    passages = [
        {"id": f"p-{i}", "text": f"passage {i} " * 20, "score": 1 - i / 100, "source": f"{i}.md"}
        for i in range(50)
    ]
    record_answer(question="q", answer="a [p-49]", passages=passages, tracer_provider=provider)
    (span,) = exporter.get_finished_spans()
    assert span.dropped_attributes == 0
    assert len(span.attributes or {}) <= 128
    (record,) = _decode(exporter.get_finished_spans())
    assert not record.truncated
    assert [(p.id, p.text, p.score, p.source) for p in record.passages] == [
        (d["id"], d["text"], d["score"], d["source"]) for d in passages
    ]


def test_value_length_limit_marks_the_answer_truncated() -> None:
    provider, exporter = _provider(span_limits=SpanLimits(max_span_attribute_length=100))
    stats = ShimStats()
    record_answer(
        question="q",
        answer="a [p-1]",
        passages=[(f"p-{i}", "x" * 150) for i in range(50)],
        tracer_provider=provider,
        stats=stats,
    )
    (record,) = _decode(exporter.get_finished_spans())
    assert record.truncated
    assert stats.truncated == 1


def test_more_than_max_passages_is_marked_truncated() -> None:
    provider, exporter = _provider()
    record_answer(
        question="q",
        answer="a",
        passages=[(f"p-{i}", "t") for i in range(12)],
        tracer_provider=provider,
        max_passages=10,
    )
    (record,) = _decode(exporter.get_finished_spans())
    assert record.truncated and len(record.passages) == 10


def test_not_recording_does_no_work() -> None:
    provider, exporter = _provider(sampler=ALWAYS_OFF)
    calls: list[str] = []

    def redact(text: str) -> str:
        calls.append(text)
        return text

    with answer_span("q", tracer_provider=provider, redact=redact) as s:
        s.set_passages([("p-1", "t")])
        s.set_answer("a")
    assert exporter.get_finished_spans() == ()
    assert calls == []


def test_host_exception_is_the_hosts_and_the_span_is_not_an_answer() -> None:
    provider, exporter = _provider()
    with pytest.raises(ZeroDivisionError), answer_span("q", tracer_provider=provider) as s:
        s.set_passages([("p-1", "t")])
        1 / 0  # noqa: B018 (the host's own failure)
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    with pytest.raises(DecodeError) as err:
        _decode(exporter.get_finished_spans())
    assert err.value.reason == "no_answer_spans"


def test_shim_errors_are_counted_and_never_raised() -> None:
    provider, exporter = _provider()
    stats = ShimStats()

    class Exploding:
        @property
        def id(self) -> str:
            raise RuntimeError("boom")

    with answer_span("q", tracer_provider=provider, stats=stats) as s:
        s.set_passages([Exploding()])
        s.set_answer("a")
        s.set_answer("twice")  # misuse: counted, ignored
    assert stats.errors == 2
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None and span.attributes["output.value"] == "a"


def test_children_nest_under_the_answer_span() -> None:
    provider, exporter = _provider()
    with answer_span("q", tracer_provider=provider) as s:
        with provider.get_tracer("llm").start_as_current_span("llm.call"):
            pass
        s.set_answer("a")
    child, parent = exporter.get_finished_spans()
    assert child.parent is not None and child.parent.span_id == parent.context.span_id
