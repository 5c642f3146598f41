from __future__ import annotations

import json
import re
from typing import Any

import pysbd
import pytest

from citemon._core.records import AnswerRecord, Passage
from citemon._core.text import CitationSyntax, strip_markers
from citemon._engine.claims import PYSBD_CHUNK_CHARS, _segments, extract_claims, split_sentences


def record(answer: str, ids: list[str]) -> AnswerRecord:
    return AnswerRecord(answer=answer, passages=[Passage(id=i, text="") for i in ids])


def test_marker_after_final_punctuation_belongs_to_the_sentence_before() -> None:
    text = (
        "Kept 90 days on the plan. [p-3310] It can be extended. [p-3310] Not from the UI. [p-3312]"
    )
    assert split_sentences(text) == [
        "Kept 90 days on the plan. [p-3310]",
        "It can be extended. [p-3310]",
        "Not from the UI. [p-3312]",
    ]
    claims = extract_claims(record(text, ["p-3310", "p-3311", "p-3312"]))
    assert [c.cited_ids for c in claims] == [["p-3310"], ["p-3310"], ["p-3312"]]
    assert claims[0].text == "Kept 90 days on the plan."


@pytest.mark.parametrize(
    "text",
    [
        "Backups run at 02:00 a.m. UTC daily.",
        "Use a short name, e.g. the team name, for the workspace.",
        "Dr. Smith approved the change.",
        "Upgrade to v2.3.1 before Friday.",
        "The window opened on Jan. 5.",
        "Calls after 5 p.m. Eastern go to voicemail.",
    ],
)
def test_known_mis_splits_are_repaired_or_kept_intact(text: str) -> None:
    assert split_sentences(text + " Next sentence here.") == [text, "Next sentence here."]


def test_citation_syntaxes() -> None:
    ids = ["a", "b", "c", "doc3"]
    claims = extract_claims(
        record("One [2]. Two [1, 3]. Three [1][2]. Four [doc3]. Five [1; 2]. Six.", ids)
    )
    assert [c.cited_ids for c in claims] == [
        ["b"],
        ["a", "c"],
        ["a", "b"],
        ["doc3"],
        ["a", "b"],
        [],
    ]
    assert not claims[-1].cited


def test_numeric_marker_that_is_a_passage_id_is_not_a_position() -> None:
    claims = extract_claims(record("X [2]. Y [1].", ["2", "1"]))
    assert [c.cited_ids for c in claims] == [["2"], ["1"]]


def test_unknown_ids_are_kept_as_dangling() -> None:
    (claim,) = extract_claims(record("Z is true [p-9999][p-1].", ["p-1"]))
    assert claim.cited_ids == ["p-9999", "p-1"]
    assert claim.dangling_ids == ["p-9999"]
    (out_of_range,) = extract_claims(record("W [7].", ["p-1"]))
    assert out_of_range.dangling_ids == ["7"]


def test_paragraphs_are_split_separately_and_sentences_numbered_across_them() -> None:
    claims = extract_claims(record("First one [1].\n\nSecond one [2]. Third.", ["a", "b"]))
    assert [(c.sentence, c.text) for c in claims] == [
        (0, "First one."),
        (1, "Second one."),
        (2, "Third."),
    ]


def test_configurable_marker_pattern() -> None:
    syntax = CitationSyntax(r"\(\(([\w-]+)\)\)")
    claims = extract_claims(record("Alpha ((p-1)). Beta ((p-2)).", ["p-1", "p-2"]), syntax)
    assert [c.cited_ids for c in claims] == [["p-1"], ["p-2"]]
    assert strip_markers("Alpha ((p-1)).", syntax) == "Alpha."


def test_long_answer_is_split_paragraph_by_paragraph(monkeypatch: pytest.MonkeyPatch) -> None:
    # pysbd is quadratic in its input: it must see one paragraph at a time, never the answer.
    seen = _pysbd_inputs(monkeypatch)
    text = "\n\n".join(f"Sentence number {i} is here [1]." for i in range(2000))
    assert len(split_sentences(text)) == 2000
    assert max(seen) < 40


@pytest.mark.shared_data
def test_expertqa_claims_match_the_annotators(shared_data) -> None:  # type: ignore[no-untyped-def]
    def norm(text: str) -> str:
        return re.sub(r"\W+", " ", strip_markers(text).lower()).strip()

    total = matched = same_ids = 0
    with open(shared_data / "expertqa" / "val.jsonl", encoding="utf-8") as f:
        for line in f:
            data = json.loads(line)
            ours = {norm(c.text): c for c in extract_claims(AnswerRecord.model_validate(data))}
            for label in data["labels"]:
                total += 1
                claim = ours.get(norm(label["claim"]))
                if claim is None:
                    continue
                matched += 1
                same_ids += set(claim.cited_ids) == set(label["cited_ids"])
    print(f"expertqa claims matched {matched}/{total} = {matched / total:.3f}; "
          f"same cited IDs {same_ids}/{matched} = {same_ids / matched:.4f}")  # fmt: skip
    assert total == 1520
    assert matched / total >= 0.88
    assert same_ids / matched >= 0.99


def _pysbd_inputs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every text handed to pysbd from now on (the real segmenter still runs)."""
    seen: list[int] = []
    real = pysbd.Segmenter.segment

    def segment(self: pysbd.Segmenter, text: str) -> Any:
        seen.append(len(text))
        return real(self, text)

    monkeypatch.setattr(pysbd.Segmenter, "segment", segment)
    return seen


def test_a_long_paragraph_splits_in_linear_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # pysbd alone took 20 s on 128 KB and ~20 min on 1 MB (quadratic, on the event loop). Linear
    # means pysbd sees windows of bounded size whose lengths add up to about the paragraph once
    # (each window starts where the last one's final whole sentence ended). Timings: bench.
    seen = _pysbd_inputs(monkeypatch)
    sentence = "Plan {i} costs ${i}.00 per month, e.g. for Dr. Lee's team [p-{j}]."
    paragraph = " ".join(sentence.format(i=i, j=i % 7) for i in range(6000))
    assert len(paragraph) > 390_000
    sentences = split_sentences(paragraph)
    assert max(seen) <= PYSBD_CHUNK_CHARS
    assert len(paragraph) <= sum(seen) < 1.1 * len(paragraph)
    assert len(sentences) == 6000
    assert sentences[4321] == "Plan 4321 costs $4321.00 per month, e.g. for Dr. Lee's team [p-2]."


def test_windows_find_the_sentences_pysbd_finds_whole() -> None:
    paragraph = " ".join(
        f"At 02:00 a.m. UTC the U.S. office of Acme Inc. runs job {i} [{i % 3 + 1}]. "
        f"It takes approx. {i} min. [p-{i}] Then e.g. logs rotate?"
        for i in range(40)
    )
    whole = _segments(paragraph, limit=10**9)
    assert _segments(paragraph, limit=400) == whole
    assert len(whole) > 80
