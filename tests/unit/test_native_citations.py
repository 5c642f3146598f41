"""Native citations (docs/dialects.md, "Native citations"): which sentence a provider's citation
belongs to, its offsets as each provider defines them, the quote check, and the answers whose
citations an instrumentation dropped. The real SDKs' traces are tests/integration's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from citemon._core.errors import DecodeError
from citemon._core.records import AnswerRecord, NativeCitation, Passage
from citemon._core.text import CitationSyntax
from citemon._engine.claims import extract_claims
from citemon._engine.scoring import Scorer
from citemon._metrics.definitions import Metrics
from citemon._otlp.assembly import TraceAssembler
from citemon._otlp.native_citations import read_native
from citemon._otlp.spans import Limits, ResourceInfo, TraceSpan
from tests.integration import native_traces as nt
from tests.integration.dialect_traces import PASSAGES
from tests.oracles import SpecimenTextJudge

LIMITS = Limits()


def _span(output: dict[str, Any], request: dict[str, Any] | None = None) -> dict[str, Any]:
    attrs: dict[str, Any] = {"output.value": json.dumps(output)}
    if request is not None:
        attrs["input.value"] = json.dumps(request)
    return attrs


def _record(answer: str, citations: list[dict[str, Any]], **passages: str) -> AnswerRecord:
    return AnswerRecord(
        answer=answer,
        passages=[Passage(id=k.replace("_", "-"), text=v) for k, v in passages.items()],
        citations=[NativeCitation.model_validate(c) for c in citations],
    )


# -- which sentence a citation belongs to ---------------------------------------------------------


def test_a_cited_phrase_gives_its_sentence_the_passages_and_others_stay_uncited() -> None:
    answer = "Logs are kept 90 days on Business. Nothing else is known. Ask support."
    record = _record(
        answer,
        [{"start": 14, "end": 21, "ids": ["p-1"]}, {"start": 58, "end": 70, "ids": ["p-2"]}],
        p_1="Audit logs: 90 days.",
        p_2="Support handles it.",
    )
    claims = extract_claims(record)
    assert [(c.text, c.cited_ids) for c in claims] == [
        ("Logs are kept 90 days on Business.", ["p-1"]),
        ("Nothing else is known.", []),
        ("Ask support.", ["p-2"]),
    ]


def test_an_insertion_point_belongs_to_the_sentence_that_ends_there() -> None:
    answer = "First one. Second one. Third one."
    record = _record(
        answer,
        [{"start": 10, "end": 10, "ids": ["p-1"]}, {"start": 33, "end": 33, "ids": ["p-2"]}],
        p_1="a",
        p_2="b",
    )
    assert [c.cited_ids for c in extract_claims(record)] == [["p-1"], [], ["p-2"]]


def test_a_citation_over_two_sentences_is_carried_by_both() -> None:
    record = _record("One fact. Two facts.", [{"start": 0, "end": 20, "ids": ["p-1"]}], p_1="x")
    assert [c.cited_ids for c in extract_claims(record)] == [["p-1"], ["p-1"]]


def test_an_empty_citation_list_makes_every_sentence_uncited_and_markers_are_ignored() -> None:
    record = _record("It is so [p-1]. Yes.", [], p_1="x")
    assert [c.cited_ids for c in extract_claims(record)] == [[], []]


def test_the_applications_id_in_metadata_is_what_the_claim_cites() -> None:
    record = AnswerRecord(
        answer="Logs are kept 90 days.",
        passages=[
            Passage(id="file-a", text="chunk 1", metadata={"passage_id": "kb-7"}),
            Passage(id="file-a#2", text="chunk 2", metadata={"passage_id": "kb-7"}),
        ],
        citations=[NativeCitation(start=0, end=22, ids=["file-a"])],
    )
    (claim,) = extract_claims(record)
    assert claim.cited_ids == ["kb-7"]
    assert claim.resolved_ids == ["file-a", "file-a#2"]  # every chunk of the cited document


def test_a_citation_naming_no_passage_is_dangling() -> None:
    record = _record("One fact.", [{"start": 0, "end": 9, "ids": ["document-7"]}], p_1="x")
    (claim,) = extract_claims(record)
    assert (claim.cited_ids, claim.dangling_ids) == (["document-7"], ["document-7"])


# -- the quote check ------------------------------------------------------------------------------


async def test_a_quote_that_is_not_in_its_passage_is_reported_and_counted() -> None:
    s1, s2 = nt.SENTENCES[0], nt.SENTENCES[1]
    answer = f"{s1} {s2}"
    record = AnswerRecord(
        answer=answer,
        passages=[Passage(id=p, text=PASSAGES[p]) for p in nt.ORDER],
        citations=[
            # a quote from the cited passage, with its line breaks and spacing changed
            NativeCitation(
                start=0, end=len(s1), ids=["p-3310"], quote="Audit log retention is 90\n days"
            ),
            # a quote from another passage than the one cited
            NativeCitation(
                start=len(s1) + 1,
                end=len(answer),
                ids=["p-3310"],
                quote="custom data retention terms",
            ),
        ],
        service="bot",
        version="v1",
        environment="prod",
    )
    score = await Scorer(SpecimenTextJudge()).score(record)
    assert [c.quote_mismatch for c in score.claims] == [False, True]
    assert [c.verdict for c in score.claims] == ["correct", "misattributed"]  # never changed
    out = score.model_dump()
    assert "quote_mismatch" not in out["claims"][0] and out["claims"][1]["quote_mismatch"] is True
    registry = CollectorRegistry()
    Metrics(registry).record_answer(score)
    labels = {"service": "bot", "version": "v1", "environment": "prod"}
    assert registry.get_sample_value("citemon_quote_mismatches_total", labels) == 1


async def test_a_quote_of_a_passage_without_text_is_not_called_a_mismatch() -> None:
    record = AnswerRecord(
        answer="One fact.",
        passages=[Passage(id="u", text="")],
        citations=[NativeCitation(start=0, end=9, ids=["u"], quote="anything")],
    )
    (claim,) = extract_claims(record)
    assert not claim.quote_mismatch


# -- offsets as each provider defines them --------------------------------------------------------


def _gemini(answer: str, segments: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": answer}]},
                "grounding_metadata": {
                    "grounding_chunks": [
                        {"retrieved_context": {"title": "a.md", "text": "Les journaux: 90 jours."}},
                        {"retrieved_context": {"title": "b.md", "text": "Contactez le support."}},
                    ],
                    "grounding_supports": segments,
                },
            }
        ]
    }


def test_gemini_segments_are_utf8_bytes_and_one_starting_at_zero_has_no_start() -> None:
    first, second = "Les journaux sont conservés 90 jours.", "Écrivez au support."
    answer = f"{first} {second}"
    start = len(f"{first} ".encode())
    got = read_native(
        _span(
            _gemini(
                answer,
                [
                    {
                        "segment": {"end_index": len(first.encode()), "text": first},
                        "grounding_chunk_indices": [0],
                    },
                    {
                        "segment": {
                            "start_index": start,
                            "end_index": len(answer.encode()),
                            "text": second,
                        },
                        "grounding_chunk_indices": [1, 5],
                    },
                ],
            )
        ),
        LIMITS,
    )
    assert got is not None and got.provider == "gemini"
    assert [(c.start, c.end, c.ids) for c in got.citations] == [
        (0, len(first), ["a.md"]),
        (len(first) + 1, len(answer), ["b.md", "chunk-5"]),  # index 5: no such chunk
    ]
    record = AnswerRecord(answer=got.answer, passages=got.passages, citations=got.citations)
    claims = extract_claims(record)
    assert [(c.cited_ids, c.dangling_ids) for c in claims] == [
        (["a.md"], []),
        (["b.md", "chunk-5"], ["chunk-5"]),
    ]


def test_a_byte_offset_inside_a_character_is_explained_not_guessed() -> None:
    answer = "Conservés 90 jours."
    with pytest.raises(DecodeError, match="cut a character") as err:
        read_native(
            _span(_gemini(answer, [{"segment": {"end_index": 8}, "grounding_chunk_indices": [0]}])),
            LIMITS,
        )
    assert err.value.reason == "bad_attribute"


@pytest.mark.parametrize("wide", ["é", "€", "𝄞"])  # 2, 3 and 4 UTF-8 bytes
def test_gemini_byte_offsets_map_to_characters_at_every_utf8_width(wide: str) -> None:
    sentences = [f"Logs{wide} are kept{wide * 3}.", f"{wide}Write to support.", f"Done{wide}."]
    answer = " ".join(sentences)
    segments, at = [], 0
    for n, sentence in enumerate(sentences):
        start = answer.index(sentence)
        end = start + len(sentence)
        size = len(answer[:start].encode())
        at = size + len(sentence.encode())
        segments.append(
            {
                "segment": {"start_index": size, "end_index": at, "text": sentence},
                "grounding_chunk_indices": [n % 2],
            }
        )
        assert answer[start:end] == sentence
    got = read_native(_span(_gemini(answer, segments)), LIMITS)
    assert got is not None
    assert [(c.start, c.end) for c in got.citations] == [
        (answer.index(s), answer.index(s) + len(s)) for s in sentences
    ]
    assert at == len(answer.encode())  # the last segment ends at the answer's end
    for inside in range(1, len(wide.encode())):  # every byte inside the wide character
        cut = [{"segment": {"end_index": len(b"Logs") + inside}, "grounding_chunk_indices": [0]}]
        with pytest.raises(DecodeError, match="cut a character"):
            read_native(_span(_gemini(answer, cut)), LIMITS)


def test_a_cited_phrase_that_is_not_at_its_offsets_is_explained() -> None:
    body = nt.cohere_chat()
    body["message"]["citations"][1]["start"] += 1
    request = {"documents": [{"id": p, "data": {"text": PASSAGES[p]}} for p in nt.ORDER]}
    with pytest.raises(DecodeError, match=r"cohere citations: citation 1 says it covers"):
        read_native(_span(body, request), LIMITS)


def test_offsets_past_the_answer_are_explained() -> None:
    body = nt.openai_chat_completion()
    body["choices"][0]["message"]["annotations"][2]["url_citation"]["end_index"] = 999
    with pytest.raises(DecodeError, match="outside the answer"):
        read_native(_span(body), LIMITS)


def test_a_file_citation_whose_results_were_not_included_names_the_file_for_the_store() -> None:
    body = nt.openai_response()
    body["output"][0]["results"] = None  # no include=["file_search_call.results"]
    got = read_native(_span(body), LIMITS)
    assert got is not None
    assert [(p.id, p.text) for p in got.passages] == [("file-3310aa", ""), ("file-3312aa", "")]
    assert [c.ids for c in got.citations] == [["file-3310aa"], ["file-3310aa"], ["file-3312aa"]]


def test_anthropic_indexes_documents_and_search_results_separately() -> None:
    request = {
        "messages": [
            {"role": "user", "content": [
                {"type": "search_result", "source": "kb://s0", "title": "S",
                 "content": [{"type": "text", "text": "search text"}]},
                {"type": "document", "title": "doc-a",
                 "source": {"type": "text", "media_type": "text/plain", "data": "doc text"}},
                {"type": "text", "text": "Q?"},
            ]},
        ]
    }  # fmt: skip
    out = {
        "type": "message",
        "content": [
            {"type": "text", "text": "From the doc.", "citations": [
                {"type": "char_location", "document_index": 0, "cited_text": "doc text",
                 "start_char_index": 0, "end_char_index": 8}]},
            {"type": "text", "text": " From the search.", "citations": [
                {"type": "search_result_location", "search_result_index": 0,
                 "cited_text": "search text", "source": "kb://s0",
                 "start_block_index": 0, "end_block_index": 1}]},
            {"type": "text", "text": " Unsourced."},
        ],
    }  # fmt: skip
    got = read_native(_span(out, request), LIMITS)
    assert got is not None and got.question == "Q?"
    assert [(p.id, p.text) for p in got.passages] == [
        ("kb://s0", "search text"),
        ("doc-a", "doc text"),
    ]
    record = AnswerRecord(answer=got.answer, passages=got.passages, citations=got.citations)
    claims = extract_claims(record)
    assert [c.cited_ids for c in claims] == [["doc-a"], ["kb://s0"], []]


def test_a_request_that_asked_and_got_no_citations_is_uncited_not_unread() -> None:
    body = nt.anthropic_message("documents")
    for block in body["content"]:
        block.pop("citations", None)
    request = {"messages": [{"role": "user", "content": nt._anthropic_documents()}]}
    got = read_native(_span(body, request), LIMITS)
    assert got is not None and got.citations == [] and len(got.passages) == 3
    # Without citations asked for or given, the span is read as any LLM span.
    assert (
        read_native(_span(body, {"messages": [{"role": "user", "content": "Q"}]}), LIMITS) is None
    )


# -- citations an instrumentation dropped ---------------------------------------------------------


def _part(span_id: str, **kw: Any) -> TraceSpan:
    return TraceSpan(
        trace_id="t" * 32,
        span_id=span_id,
        parent_span_id=kw.pop("parent", ""),
        kind=kw.pop("kind", ""),
        start_ns=kw.pop("start", 0),
        end_ns=kw.pop("end", 10),
        resource=ResourceInfo(),
        **kw,
    )


def test_an_answer_whose_citations_were_dropped_is_counted_never_scored_uncited() -> None:
    """Even with the passages at hand (a retriever span), scoring it would call every claim
    uncited: it is counted under its own outcome, at once, and explained."""
    assembler = TraceAssembler(explain=True)
    retriever = _part(
        "r" * 16, parent="a" * 16, kind="RETRIEVER", documents=[Passage(id="p", text="x")]
    )
    chat = _part(
        "a" * 16, answer="One fact.", citations_dropped="the request asked; X drops them", end=20
    )
    assert assembler.add([retriever, chat]) == []
    assert assembler.outcomes()["citations_not_recorded"] == 1
    assert assembler.outcomes()["completed"] == 0 and len(assembler) == 0
    (item,) = assembler.take_unanswered()
    assert item.outcome == "citations_not_recorded"
    from citemon._otlp.explanations import explain

    message = explain(item, ["retrieve", "chat"]).message
    assert "gave no answer (citations_not_recorded)" in message
    assert "citations not recorded: the request asked; X drops them" in message


def test_a_trace_with_native_citations_elsewhere_is_scored() -> None:
    """An outer chain repeats the model's text; the LLM span carries the citations."""
    docs = [Passage(id="p", text="x")]
    llm = _part(
        "l" * 16,
        parent="c" * 16,
        kind="LLM",
        answer="One fact.",
        documents=docs,
        citations=[NativeCitation(start=0, end=9, ids=["p"])],
        start=1,
        end=9,
    )
    chain = _part("c" * 16, kind="CHAIN", answer="One fact.", end=10)
    (record,) = TraceAssembler().add([llm, chain])
    assert record.citations == [NativeCitation(start=0, end=9, ids=["p"])]
    assert record.passages == docs


def test_input_records_with_citations_are_validated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``citemon score`` reads ``citations`` from JSONL; impossible offsets are a clear error."""
    from citemon.cli import main

    good = {
        "id": "a-1",
        "answer": nt.ANSWER,
        "passages": [{"id": p, "text": PASSAGES[p]} for p in nt.ORDER],
        "citations": [
            {"start": s, "end": e, "ids": [pid]}
            for (s, e), pid in zip(nt._offsets(), nt.CITED, strict=True)
        ],
    }
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(good) + "\n", encoding="utf-8")
    code = main(
        ["score", str(src), "--judge", "tests.oracles:specimen_text_judge", "--format", "json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["summary"]["citation_accuracy"] == 0.3333
    quoted = {**good, "citations": [{**good["citations"][0], "quote": "not in p-3310"}]}
    src.write_text(json.dumps(quoted) + "\n", encoding="utf-8")
    main(["score", str(src), "--judge", "tests.oracles:specimen_text_judge"])
    table = capsys.readouterr().out.splitlines()
    assert table[1].startswith("   0  correct ") and table[1].endswith(
        " · quote not in the cited passage"
    )
    src.write_text(json.dumps(good) + "\n", encoding="utf-8")
    code = main(
        ["score", str(src), "--explain-input", "--judge", "tests.oracles:specimen_text_judge"]
    )
    shown = capsys.readouterr().out
    assert "  citation 0..57 'Audit logs are retained for 90 days on…' → p-3310" in shown
    for bad, why in (
        ({"start": 5, "end": 2, "ids": ["p-3310"]}, "ends (2) before it starts (5)"),
        ({"start": 0, "end": 999, "ids": ["p-3310"]}, "past the answer (181 chars)"),
    ):
        src.write_text(json.dumps({**good, "citations": [bad]}) + "\n", encoding="utf-8")
        code = main(["score", str(src), "--judge", "tests.oracles:specimen_text_judge"])
        err = capsys.readouterr().err
        assert code != 0 and why in err, err


def test_cohere_documents_given_without_ids_are_matched_by_their_text() -> None:
    body = nt.cohere_chat()
    for c in body["message"]["citations"]:
        for src in c["sources"]:
            src["id"] = "doc:" + src["id"]  # whatever ID Cohere gives an unnamed document
    request = {"documents": [{"data": {"text": PASSAGES[p]}} for p in nt.ORDER]}
    got = read_native(_span(body, request), LIMITS)
    assert got is not None
    assert [p.id for p in got.passages] == ["doc:0", "doc:1", "doc:2"]  # no duplicates
    assert [c.ids for c in got.citations] == [["doc:1"], ["doc:1"], ["doc:2"]]


def test_a_gemini_segments_part_index_counts_every_part_of_the_content() -> None:
    # part_index is "the index of a Part object within its parent Content object": a thought
    # summary (include_thoughts) or a function call before the text still takes an index.
    first, second = "Les journaux sont conservés 90 jours.", "Écrivez au support."
    body = _gemini(
        "",
        [
            {
                "segment": {"part_index": 1, "end_index": len(first.encode()), "text": first},
                "grounding_chunk_indices": [0],
            },
            {
                "segment": {"part_index": 3, "end_index": len(second.encode()), "text": second},
                "grounding_chunk_indices": [1],
            },
        ],
    )
    body["candidates"][0]["content"]["parts"] = [
        {"text": "Looking up the retention policy.", "thought": True},
        {"text": first},
        {"function_call": {"name": "noop", "args": {}}},
        {"text": second},
    ]
    got = read_native(_span(body), LIMITS)
    assert got is not None and got.answer == first + second
    assert [(got.answer[c.start : c.end], c.ids) for c in got.citations] == [
        (first, ["a.md"]),
        (second, ["b.md"]),
    ]


@pytest.mark.parametrize(
    "model", ["acme-research-7b", "o3-deep-research", "searchlight-8b", "my-search-bot"]
)
def test_a_chat_completion_from_a_model_not_openais_search_model_is_read_as_before(
    model: str,
) -> None:
    # Any OpenAI-compatible server (vLLM, llama.cpp, Ollama) answers chat.completion: a model
    # whose name merely holds "search" is not OpenAI's search model. Taken for one, an answer
    # with inline markers lost its retriever's passages and had every claim called uncited.
    body = nt.openai_chat_completion()
    body["model"] = model
    body["choices"][0]["message"]["annotations"] = []
    body["choices"][0]["message"]["content"] = "Logs are kept 90 days [p-3310]."
    assert read_native(_span(body), LIMITS) is None


@pytest.mark.parametrize(
    "model", ["gpt-4o-search-preview", "gpt-4o-mini-search-preview-2025-03-11"]
)
def test_openais_search_models_answer_without_annotations_cites_nothing(model: str) -> None:
    body = nt.openai_chat_completion()
    body["model"] = model
    body["choices"][0]["message"]["annotations"] = []
    got = read_native(_span(body), LIMITS)
    assert got is not None and got.citations == [] and got.passages == []


def test_a_gemini_call_with_function_tools_only_is_read_as_before() -> None:
    # An agent's Gemini turn declares its search tool as a function: no grounding was asked
    # for. Taken for a grounded answer, it lost the tool's passages and every claim was uncited.
    body = _gemini("Logs are kept 90 days [p-3310].", [])
    del body["candidates"][0]["grounding_metadata"]
    request = {
        "contents": "How long are logs kept?",
        "config": {"tools": [{"function_declarations": [{"name": "search_docs"}]}]},
    }
    assert read_native(_span(body, request), LIMITS) is None
    request["config"]["tools"].append({"file_search": {"file_search_store_names": ["s"]}})
    got = read_native(_span(body, request), LIMITS)
    assert got is not None and got.citations == []
    request["config"]["tools"] = [{"googleSearch": {}}]  # the REST JSON's camelCase
    assert read_native(_span(body, request), LIMITS) is not None


def test_a_gemini_function_tool_named_like_a_grounding_tool_asks_for_no_grounding() -> None:
    # opentelemetry-instrumentation-google-genai records a function declaration as
    # {"type": "function", "name": …} and a grounding tool as {"type": "file_search", "name":
    # "file_search"}: an agent's own function called `retrieval` grounds nothing.
    from citemon._otlp.dropped_citations import citations_dropped
    from citemon._otlp.spans import RawSpan

    def raw(tools: list[dict[str, Any]]) -> RawSpan:
        attrs = {
            "gen_ai.provider.name": "gcp.gemini",
            "gen_ai.tool.definitions": json.dumps(tools),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "Kept 90 days."}]}]
            ),
        }
        return RawSpan(
            resource=ResourceInfo(),
            trace_id="t" * 32,
            span_id="s" * 16,
            parent_span_id="",
            name="chat",
            start_ns=0,
            end_ns=1,
            error=False,
            dropped_attributes=0,
            attrs=attrs,
        )

    function = {"type": "function", "name": "retrieval", "description": "search the docs"}
    assert citations_dropped(raw([function])) is None
    grounding = {"type": "file_search", "name": "file_search"}
    assert "ground its answer (file_search)" in (
        citations_dropped(raw([function, grounding])) or ""
    )


def test_a_quote_in_a_truncated_answer_is_not_called_a_mismatch() -> None:
    # The shim (or any producer) cut the passage at the span attribute length limit and
    # marked the answer truncated: the quote's end is past the cut, which is no evidence
    # against the provider (as a failed claim in a truncated answer is none against its
    # citation).
    whole = PASSAGES["p-3310"]
    quote = whole[-30:]
    record = AnswerRecord(
        answer="Logs are kept 90 days.",
        passages=[Passage(id="p-3310", text=whole[:40])],
        citations=[NativeCitation(start=0, end=4, ids=["p-3310"], quote=quote)],
        truncated=True,
    )
    (claim,) = extract_claims(record)
    assert not claim.quote_mismatch
    (claim,) = extract_claims(record.model_copy(update={"truncated": False}))
    assert claim.quote_mismatch


def test_a_lone_surrogate_in_a_document_or_a_citation_is_invalid_utf8() -> None:
    # JSON may escape a lone surrogate ("\ud800"); every other reader refuses it as
    # invalid_utf8 (a record holding one cannot be written as JSON: the results topic,
    # the evaluation events).
    answer = "Logs are kept 90 days."
    out = {
        "type": "message",
        "content": [
            {
                "type": "text",
                "text": answer,
                "citations": [{"type": "char_location", "document_index": 0, "cited_text": "x"}],
            }
        ],
    }
    document = {"type": "document", "source": {"type": "text", "data": "Logs: 90 days."}}
    request = {"messages": [{"role": "user", "content": [{**document, "title": "p-1"}]}]}
    assert read_native(_span(out, request), LIMITS) is not None
    bad_text = {**document, "source": {"type": "text", "data": "Logs: \ud800 days."}}
    bad_title = {**document, "title": "p-\udc00"}
    for block in (bad_text, bad_title):
        request = {"messages": [{"role": "user", "content": [block]}]}
        with pytest.raises(DecodeError) as err:
            read_native(_span(out, request), LIMITS)
        assert err.value.reason == "invalid_utf8"
    out["content"][0]["citations"][0]["cited_text"] = "\ud800"
    request = {"messages": [{"role": "user", "content": [{**document, "title": "p-1"}]}]}
    with pytest.raises(DecodeError) as err:
        read_native(_span(out, request), LIMITS)
    assert err.value.reason == "invalid_utf8"
    from citemon._otlp.native_citations import shim_citations

    value = json.dumps([{"start": 0, "end": 4, "ids": ["p-\ud800"]}])
    with pytest.raises(DecodeError) as err:
        shim_citations({"citemon.citations": value}, answer)
    assert err.value.reason == "invalid_utf8"


def test_a_lone_surrogate_in_a_gemini_answer_is_invalid_utf8_as_in_every_other_reader() -> None:
    # Gemini's offsets are UTF-8 bytes; counting them encoded the answer, and the
    # UnicodeEncodeError came out as bad_attribute ("span is malformed"), not invalid_utf8.
    answer = "Logs\ud800 are kept. Ask support."
    segments = [{"segment": {"start_index": 0, "end_index": 7}, "grounding_chunk_indices": [0]}]
    with pytest.raises(DecodeError) as err:
        read_native(_span(_gemini(answer, segments)), LIMITS)
    assert err.value.reason == "invalid_utf8"


def test_cohere_citations_of_the_thinking_are_not_the_answers() -> None:
    # Command A Reasoning returns a thinking block before the text, and may cite documents in
    # it: a citation's `type` (THINKING_CONTENT, TEXT_CONTENT, PLAN) says which, and its
    # `content_index` names the block its offsets are in.
    body = nt.cohere_chat()
    thinking = "The user asks about retention; document p-3310 covers it."
    body["message"]["content"].insert(0, {"type": "thinking", "thinking": thinking})
    for c in body["message"]["citations"]:
        c["content_index"] = 1
    at = thinking.index("document p-3310")
    body["message"]["citations"].insert(
        0,
        {
            "start": at,
            "end": at + 15,
            "text": "document p-3310",
            "type": "THINKING_CONTENT",
            "content_index": 0,
            "sources": [{"type": "document", "id": "p-3310"}],
        },
    )
    request = {"documents": [{"id": p, "data": {"text": PASSAGES[p]}} for p in nt.ORDER]}
    got = read_native(_span(body, request), LIMITS)
    assert got is not None and got.answer == nt.ANSWER
    want = read_native(_span(nt.cohere_chat(), request), LIMITS)
    assert want is not None and got.citations == want.citations


def test_a_dropped_citation_explanation_shows_trace_strings_escaped() -> None:
    # The scope name and the model come from the trace: printed raw, a terminal escape in
    # either would reach `citemon score`'s terminal (span names are shown with repr()).
    from citemon._otlp.dropped_citations import citations_dropped
    from citemon._otlp.spans import RawSpan

    raw = RawSpan(
        resource=ResourceInfo(),
        trace_id="t" * 32,
        span_id="s" * 16,
        parent_span_id="",
        name="chat",
        start_ns=0,
        end_ns=1,
        error=False,
        dropped_attributes=0,
        attrs={
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o-search-preview\x1b[2J",
        },
        scope="evil\x1b]0;owned\x07",
    )
    why = citations_dropped(raw) or ""
    assert (
        "search model 'gpt-4o-search-preview\\x1b[2J'" in why and "'evil\\x1b]0;owned\\x07'" in why
    )
    assert not any(ch in why for ch in "\x1b\x07")


async def test_a_file_citation_is_one_citation_of_every_chunk_of_the_file() -> None:
    # file_search returns several chunks of one file (no attributes: no application ID); an
    # annotation cites the file. One citation, as a marker naming a source document is: under
    # --policy single it is not a multi-citation, and its chunks are no over-broad citations.
    body = nt.openai_response()
    results = body["output"][0]["results"]
    for r in results:
        del r["attributes"]
    whole = results[1]  # p-3310's file, in two chunks
    results[1:2] = [
        {**whole, "text": whole["text"][:40]},
        {**whole, "text": whole["text"][40:]},
    ]
    got = read_native(_span(body), LIMITS)
    assert got is not None
    f3310 = whole["file_id"]
    assert [p.id for p in got.passages][1:3] == [f3310, f"{f3310}#2"]
    record = AnswerRecord(answer=got.answer, passages=got.passages, citations=got.citations)
    claims = extract_claims(record, CitationSyntax(passage_id_keys=()))
    assert [c.cited_ids for c in claims] == [[f3310], [f3310], [nt.FILE_IDS["p-3312"]]]
    assert claims[0].resolution == {f3310: [f3310, f"{f3310}#2"]}
    assert claims[0].resolved_ids == [f3310, f"{f3310}#2"] and claims[0].dangling_ids == []
