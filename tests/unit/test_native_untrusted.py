"""A provider response in a trace is untrusted input: what one span can hold (a Kafka message,
about 1 MB) is read in time linear in its size. Each test is one such span; read quadratically,
each took hours (20,000 empty grounding chunks, 80 kB, took 14 s; 20,000 file-search results
39 s), so the suite's per-test timeout fails them. No timing is asserted: the exact outcome is."""

from __future__ import annotations

import json
from typing import Any

import pytest

from citemon._core.errors import DecodeError
from citemon._core.records import AnswerRecord, NativeCitation, Passage
from citemon._engine.claims import extract_claims
from citemon._otlp.native_citations import read_native
from citemon._otlp.spans import Limits

LIMITS = Limits()
SPAN_BYTES = 1_000_000  # Kafka's default message.max.bytes: one span's whole budget


def _span(output: dict[str, Any], request: dict[str, Any] | None = None) -> dict[str, Any]:
    attrs = {"output.value": json.dumps(output)}
    if request is not None:
        attrs["input.value"] = json.dumps(request)
    assert len(attrs["output.value"]) <= 2 * SPAN_BYTES
    return attrs


def test_a_megabyte_of_empty_grounding_chunks_is_too_many_passages() -> None:
    n = SPAN_BYTES // 4  # "{}, " each
    out = {
        "candidates": [
            {
                "content": {"parts": [{"text": "Logs are kept 90 days."}]},
                "grounding_metadata": {"grounding_chunks": [{}] * n, "grounding_supports": []},
            }
        ]
    }
    with pytest.raises(DecodeError, match=f"{n} documents > 1000") as err:
        read_native(_span(out), LIMITS)
    assert err.value.reason == "too_many_passages"


def test_a_megabyte_of_file_search_results_from_one_file_is_too_many_passages() -> None:
    n = SPAN_BYTES // 20  # '{"file_id": "f"}, ' each
    out = {
        "object": "response",
        "output": [
            {"type": "file_search_call", "results": [{"file_id": "f"}] * n},
            {
                "type": "message",
                "content": [{"type": "output_text", "text": "Hi.", "annotations": []}],
            },
        ],
        "tools": [{"type": "file_search"}],
    }
    with pytest.raises(DecodeError, match=f"{n} documents > 1000") as err:
        read_native(_span(out), LIMITS)
    assert err.value.reason == "too_many_passages"


def test_a_grounding_support_naming_every_chunk_names_each_once() -> None:
    chunks = 900  # under max_passages: read, not refused
    indices = list(range(chunks)) * (SPAN_BYTES // (5 * chunks))
    out = {
        "candidates": [
            {
                "content": {"parts": [{"text": "Logs are kept 90 days."}]},
                "grounding_metadata": {
                    "grounding_chunks": [
                        {"retrieved_context": {"title": f"d{i}", "text": "t"}}
                        for i in range(chunks)
                    ],
                    "grounding_supports": [
                        {"segment": {"end_index": 5}, "grounding_chunk_indices": indices}
                    ],
                },
            }
        ]
    }
    got = read_native(_span(out), LIMITS)
    assert got is not None
    assert got.citations[0].ids == [f"d{i}" for i in range(chunks)]


def test_a_cohere_citation_with_a_megabyte_of_distinct_sources_names_each_once() -> None:
    n = SPAN_BYTES // 40  # '{"type": "document", "id": "doc:12345"}, '
    answer = "Logs are kept 90 days."
    out = {
        "finish_reason": "COMPLETE",
        "message": {
            "role": "assistant",
            "content": [{"type": "text", "text": answer}],
            "citations": [
                {
                    "start": 0,
                    "end": 4,
                    "text": "Logs",
                    "sources": [{"type": "document", "id": f"doc:{i}"} for i in range(n)],
                }
            ],
        },
    }
    request = {"documents": [{"id": "doc:0", "data": {"text": "Logs: 90 days."}}]}
    with pytest.raises(DecodeError, match=f"{n} documents > 1000"):
        read_native(_span(out, request), LIMITS)


def test_a_sentence_citing_a_megabyte_of_distinct_ids_carries_each_once() -> None:
    n = 150_000  # '"x123456", ': an input record's citations, or the shim's attribute
    answer = "Logs are kept 90 days."
    record = AnswerRecord(
        answer=answer,
        passages=[Passage(id="p-1", text="Logs: 90 days.")],
        citations=[NativeCitation(start=0, end=4, ids=[f"x{i}" for i in range(n)] + ["p-1"])],
    )
    (claim,) = extract_claims(record)
    assert len(claim.cited_ids) == n + 1 and claim.cited_ids[-1] == "p-1"
    assert len(claim.dangling_ids) == n and claim.resolved_ids == ["p-1"]


def test_many_citations_over_many_sentences_each_go_to_their_own_sentence() -> None:
    sentences = 40_000  # 560 kB of answer, under max_answer_bytes
    answer = " ".join(f"S{i} holds." for i in range(sentences))
    citations = []
    at = 0
    for i in range(sentences):
        citations.append(NativeCitation(start=at, end=at + 2, ids=[f"p-{i % 3}"]))
        citations.append(NativeCitation(start=at + 9, end=at + 9, ids=[f"p-{(i + 1) % 3}"]))
        at += len(f"S{i} holds. ")
    record = AnswerRecord(
        answer=answer,
        passages=[Passage(id=f"p-{i}", text="t") for i in range(3)],
        citations=citations,
    )
    claims = extract_claims(record)
    assert len(claims) == sentences
    assert all(c.cited_ids == [f"p-{i % 3}", f"p-{(i + 1) % 3}"] for i, c in enumerate(claims))


def test_many_quotes_of_one_long_passage_are_each_checked_against_it() -> None:
    passage = "Audit logs are kept for 90 days on the Business plan. " * 18_000  # 1 MB
    quotes = 20_000
    record = AnswerRecord(
        answer="Logs are kept 90 days.",
        passages=[Passage(id="p-1", text=passage)],
        citations=[NativeCitation(start=0, end=4, ids=["p-1"], quote="kept for 90 days")] * quotes
        + [NativeCitation(start=5, end=8, ids=["p-1"], quote="kept for 91 days")],
    )
    (claim,) = extract_claims(record)
    assert claim.cited_ids == ["p-1"] and claim.quote_mismatch


def test_a_citation_of_a_hundred_thousand_chunks_of_one_file_is_one_citation() -> None:
    n = 100_000
    ids = ["f", *(f"f#{i}" for i in range(2, n + 1))]
    record = AnswerRecord(
        answer="Logs are kept 90 days.",
        passages=[Passage(id=i, text="t") for i in ids],
        citations=[NativeCitation(start=0, end=4, ids=ids)],
    )
    (claim,) = extract_claims(record)
    assert claim.cited_ids == ["f"] and claim.resolution == {"f": ids}


@pytest.mark.parametrize(
    "module",
    [
        "citemon._otlp.native_citations",
        "citemon._otlp.dropped_citations",
        "citemon._otlp.tool_results",
        "citemon._engine.native",
    ],
)
def test_each_module_of_the_native_and_agent_readers_imports_first(module: str) -> None:
    # In a fresh interpreter: native_citations and the dialects package import each other.
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
