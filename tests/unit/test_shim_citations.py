"""The shim's ``record_*_citations`` helpers, against each provider's response shape: the real
SDK's response type (validated from the provider's documented JSON, no network) and that JSON as
a plain dict. What the helper records, the monitor reads back as the specimen's citations and
scores exactly (0.33, faithfulness 1.00, 2 misattributed)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from citemon._core.records import AnswerRecord
from citemon._engine.scoring import Scorer
from citemon._otlp.decoding import decode_otlp_proto
from citemon_instrumentation import (
    ShimStats,
    answer_span,
    record_anthropic_citations,
    record_cohere_citations,
    record_gemini_citations,
    record_openai_citations,
)
from citemon_instrumentation import attributes as A
from tests.integration import native_traces as nt
from tests.integration.dialect_traces import PASSAGES, QUESTION
from tests.oracles import SpecimenTextJudge


def _gemini(body: dict[str, Any]) -> Any:
    from google.genai import types as genai_types

    return genai_types.GenerateContentResponse._from_response(response=body, kwargs={})


def _record(
    helper: Callable[..., bool], response: Any, stats: ShimStats | None = None, **kw: Any
) -> tuple[bool, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with answer_span(QUESTION, tracer_provider=provider, stats=stats or ShimStats()) as span:
        done = helper(span, response, **kw)
    return done, exporter


def _decoded(exporter: InMemorySpanExporter) -> list[AnswerRecord]:
    payload = bytes(encode_spans(exporter.get_finished_spans()).SerializeToString())
    return decode_otlp_proto(payload).records


CASES: dict[str, tuple[Callable[..., bool], Callable[[], dict[str, Any]], dict[str, Any]]] = {
    "anthropic-documents": (
        record_anthropic_citations,
        lambda: nt.anthropic_message("documents"),
        {"messages": [{"role": "user", "content": nt._anthropic_documents()}]},
    ),
    "anthropic-search-results": (
        record_anthropic_citations,
        lambda: nt.anthropic_message("search_results"),
        {"messages": [{"role": "user", "content": nt._anthropic_search_results()}]},
    ),
    "openai-responses": (record_openai_citations, nt.openai_response, {}),
    "cohere": (
        record_cohere_citations,
        nt.cohere_chat,
        {"documents": [{"id": p, "data": {"text": PASSAGES[p]}} for p in nt.ORDER]},
    ),
    "gemini": (record_gemini_citations, nt.gemini_response, {}),
}


def _typed(case: str, body: dict[str, Any]) -> Any:
    import anthropic.types
    import cohere
    import openai.types.responses

    if case.startswith("anthropic"):
        return anthropic.types.Message.model_validate(body)
    if case == "openai-responses":
        return openai.types.responses.Response.model_validate(body)
    if case == "cohere":
        return cohere.ChatResponse.model_validate(body)
    return _gemini(body)


@pytest.mark.parametrize("typed", [True, False], ids=["sdk-object", "json"])
@pytest.mark.parametrize("case", CASES)
async def test_each_helper_records_the_specimens_citations(case: str, typed: bool) -> None:
    helper, body, kw = CASES[case]
    response = _typed(case, body()) if typed else body()
    stats = ShimStats()
    done, exporter = _record(helper, response, stats, **kw)
    assert done and stats.errors == 0
    (record,) = _decoded(exporter)
    assert record.answer == nt.ANSWER and record.question == QUESTION
    assert record.citations is not None and len(record.citations) == 3
    assert {p.text for p in record.passages} == set(PASSAGES.values())
    score = await Scorer(SpecimenTextJudge()).score(record)
    assert [c.verdict for c in score.claims] == ["correct", "misattributed", "misattributed"]
    assert [c.faithful for c in score.claims] == [True, True, True]
    assert [c.pattern for c in score.claims] == [None, "previous_citation", "other"]
    assert not any(c.quote_mismatch for c in score.claims)


async def test_chat_completions_url_citations_are_recorded_without_text() -> None:
    import openai.types.chat

    response = openai.types.chat.ChatCompletion.model_validate(nt.openai_chat_completion())
    done, exporter = _record(record_openai_citations, response)
    assert done
    (record,) = _decoded(exporter)
    assert [p.id for p in record.passages] == [nt.URLS["p-3310"], nt.URLS["p-3312"]]
    assert all(p.text == "" for p in record.passages)
    score = await Scorer(SpecimenTextJudge()).score(record)
    assert [(c.verdict, c.unjudged_cause) for c in score.claims] == [
        ("unjudged", "no_passage_text")
    ] * 3


def test_a_response_without_citations_is_a_counted_error_never_raised() -> None:
    stats = ShimStats()
    done, exporter = _record(
        record_cohere_citations, {"id": "x", "text": "not a v2 response"}, stats, documents=[]
    )
    assert not done and stats.errors == 1
    (span,) = exporter.get_finished_spans()
    assert A.CITEMON_CITATIONS not in (span.attributes or {})
    # A helper of the wrong provider reads nothing either.
    stats = ShimStats()
    done, _ = _record(record_gemini_citations, nt.cohere_chat(), stats)
    assert not done and stats.errors == 1


def test_a_redact_hook_that_changes_the_answers_length_drops_the_offsets() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with answer_span(
        QUESTION, tracer_provider=provider, redact=lambda t: t.replace("90", "NN0")
    ) as span:
        done = record_gemini_citations(span, nt.gemini_response())
    assert not done
    (finished,) = exporter.get_finished_spans()
    attrs = finished.attributes or {}
    assert A.CITEMON_CITATIONS not in attrs and attrs[A.CITEMON_TRUNCATED] is True
    assert "changed the answer's length" in str(attrs[A.CITEMON_CITATIONS_DROPPED])


def test_quotes_go_through_the_redact_hook() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with answer_span(
        QUESTION, tracer_provider=provider, redact=lambda t: t.replace("365", "###")
    ) as span:
        messages = [{"role": "user", "content": nt._anthropic_documents()}]
        assert record_anthropic_citations(
            span, nt.anthropic_message("documents"), messages=messages
        )
    (finished,) = exporter.get_finished_spans()
    items = json.loads(str((finished.attributes or {})[A.CITEMON_CITATIONS]))
    assert items[0]["quote"].endswith("### days on Enterprise.")
    assert all("365" not in i["quote"] for i in items)


def test_a_sampled_out_span_records_nothing_and_costs_no_parse() -> None:
    provider = TracerProvider(sampler=ALWAYS_OFF)
    stats = ShimStats()
    with answer_span(QUESTION, tracer_provider=provider, stats=stats) as span:
        assert not record_gemini_citations(span, object())  # not even read
    assert stats.errors == 0


def test_citations_over_the_attribute_length_limit_mark_the_answer_truncated() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attribute_length=300))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with answer_span(QUESTION, tracer_provider=provider) as span:
        messages = [{"role": "user", "content": nt._anthropic_documents()}]
        response = nt.anthropic_message("documents")  # three quotes: over 300 characters
        assert not record_anthropic_citations(span, response, messages=messages)
    (finished,) = exporter.get_finished_spans()
    assert (finished.attributes or {})[A.CITEMON_TRUNCATED] is True


async def test_an_answer_cut_by_the_attribute_length_limit_keeps_no_offsets_past_it() -> None:
    # The SDK cuts the answer to the limit; offsets into the whole answer would point past the
    # cut (the monitor would refuse the trace as a bad attribute): the citations are not
    # recorded, and the span says why.
    exporter = InMemorySpanExporter()
    answer = nt.cohere_chat()["message"]["content"][0]["text"]
    provider = TracerProvider(
        resource=Resource.create({"service.name": "rag-bot"}),
        span_limits=SpanLimits(max_span_attribute_length=len(answer) - 20),
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    documents = [{"id": p, "data": {"text": PASSAGES[p][:40]}} for p in nt.ORDER]
    with answer_span(QUESTION, tracer_provider=provider) as span:
        assert not record_cohere_citations(span, nt.cohere_chat(), documents=documents)
    (finished,) = exporter.get_finished_spans()
    attrs = finished.attributes or {}
    assert A.CITEMON_CITATIONS not in attrs and attrs[A.CITEMON_TRUNCATED] is True
    assert "longer than the span attribute length limit" in str(attrs[A.CITEMON_CITATIONS_DROPPED])


def test_citations_the_shim_could_not_record_are_counted_never_scored_uncited() -> None:
    # A redact hook that changes the answer's length leaves no offsets to record. Scored, the
    # answer's claims would be `uncited` (truncation keeps an uncited verdict) and coverage would
    # fall for a fault of the tracing: the trace is counted as citations_not_recorded instead.
    from citemon._otlp.assembly import TraceAssembler

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with answer_span(
        QUESTION, tracer_provider=provider, redact=lambda t: t.replace("90", "NN0")
    ) as span:
        assert not record_gemini_citations(span, nt.gemini_response())
    payload = bytes(encode_spans(exporter.get_finished_spans()).SerializeToString())
    batch = decode_otlp_proto(payload)
    assembler = TraceAssembler(explain=True)
    assert batch.records + assembler.add(batch.spans) + assembler.flush() == []
    assert assembler.outcomes()["citations_not_recorded"] == 1
    (item,) = assembler.take_unanswered()
    assert "redact hook changed the answer's length" in (item.parts[0].citations_dropped or "")


def test_a_lone_surrogate_in_a_gemini_answer_is_recorded_as_u_fffd_with_its_citations() -> None:
    # Counting Gemini's byte offsets raised on it, and the response's citations were lost.
    body = {
        "candidates": [
            {
                "content": {"parts": [{"text": "Logs\ud800 are kept. Ask support."}]},
                "grounding_metadata": {
                    "grounding_chunks": [{"retrieved_context": {"title": "a.md", "text": "x"}}],
                    "grounding_supports": [
                        {"segment": {"end_index": 7}, "grounding_chunk_indices": [0]}
                    ],
                },
            }
        ]
    }
    stats = ShimStats()
    done, exporter = _record(record_gemini_citations, body, stats)
    assert done and stats.errors == 0
    (record,) = _decoded(exporter)
    assert record.answer == "Logs\ufffd are kept. Ask support."
    assert [(c.start, c.end, c.ids) for c in record.citations or []] == [(0, 5, ["a.md"])]
