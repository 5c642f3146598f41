"""The demo's review loop: traffic with planted checker faults, and what a careful reader says.

The help centre's answers (:mod:`citemon._demo.data`) carry *pipeline* faults, the RAG service's
own: v1 misattributes now and then, and the v2 deploy cites the first retrieved passage for
every claim. Here two *checker* faults are planted besides them, the kind citemon gets wrong on
real traffic:

* **overlap**: the retriever cut a document into overlapping chunks, and the answer cites the
  chunk where a sentence starts, cut off before the fact; the next chunk repeats the start and
  completes it. Read as a document, the citation is right; citemon's isolated judge fails the
  cited chunk, finds the next one supports the claim and says ``misattributed``
  (``overlap: true``).
* **fused**: one sentence states two facts, the citation right after the first; the second is
  uncited. The extractor takes the sentence as one claim, the cited passage supports only half
  of it, and citemon says ``multi_hop``, where a person sees a correct citation and an uncited
  fact.

:func:`review_traffic` makes a deterministic stream of v1 and v2 answers with both, and
:func:`truth_label` says what a careful reader labels each claim (the demo's ground truth; used
by ``scripts/label_demo_review.py`` and the tests, not something a user's labels come from).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Final

from citemon._core.records import AnswerRecord, Passage
from citemon._demo.data import PASSAGES, QUESTIONS, Question, answer

__all__ = [
    "OVERLAP_CHUNKS",
    "REVIEW_FAULTS",
    "fused_answer",
    "overlap_answer",
    "review_traffic",
    "truth_label",
]

OVERLAP_CHUNKS: Final[dict[int, tuple[str, tuple[str, str, str], tuple[str, str, str]]]] = {
    2: (
        "The refund for removed seats is credited to the next invoice within 14 days.",
        (
            "p-2104",
            "billing/refunds.md",
            "Refunds for unused seats are prorated. Seats can be removed by an administrator at "
            "any time, and the refund for the removed seats is",
        ),
        (
            "p-2105",
            "billing/refunds.md",
            "Seats can be removed by an administrator at any time, and the refund for the "
            "removed seats is credited to the next invoice within 14 days.",
        ),
    ),
    7: (
        "Urgent Enterprise tickets get a first response from an on-call engineer in 60 minutes.",
        (
            "p-8804",
            "support/sla.md",
            "Urgent tickets are those that stop work for a whole team. Enterprise customers who "
            "open an urgent ticket receive a first response from an on-call engineer within",
        ),
        (
            "p-8805",
            "support/sla.md",
            "Enterprise customers who open an urgent ticket receive a first response from an "
            "on-call engineer within 60 minutes, around the clock.",
        ),
    ),
}
"""Question index → (claim, cited chunk, overlapping chunk that completes it): (id, source,
text) each. The two chunks share a long run of text (a chunking artifact)."""

REVIEW_FAULTS: Final[dict[str, tuple[tuple[str, float], ...]]] = {
    "v1": (
        ("correct", 0.64),
        ("misattributed", 0.08),
        ("uncited", 0.04),
        ("over_broad", 0.04),
        ("overlap", 0.10),
        ("fused", 0.10),
    ),
    "v2": (("correct", 0.80), ("overlap", 0.10), ("fused", 0.10)),
}
"""Per version, the share of each fault: v2 also has the first-passage bug on every answer."""


def _fused_text(question: Question) -> str:
    (first, _), (second, _) = question.facts[0], question.facts[1]
    return f"{first[:-1]} and {second[0].lower()}{second[1:]}"


def fused_answer(
    question: Question, rid: str, *, first_passage_bug: bool = False, **extra: str
) -> AnswerRecord:
    """``question``'s answer whose first two facts are one sentence, cited after the first."""
    record = answer(question, "correct", rid, first_passage_bug=first_passage_bug, **extra)
    first, source = question.facts[0]
    fused = _fused_text(question)
    labels = record.labels or []
    rest = [
        f"{t[:-1]} [{', '.join(ids)}]{t[-1]}" if ids else t
        for t, ids in ((str(x["claim"]), list(x["cited_ids"])) for x in labels[2:])
    ]
    record.answer = " ".join([f"{first[:-1]} [{source}]{fused[len(first) - 1 :]}", *rest])
    record.labels = [
        {"claim": fused, "cited_ids": [source], "verdict": "multi_hop"},
        *labels[2:],
    ]
    return record


def overlap_answer(
    index: int, rid: str, *, first_passage_bug: bool = False, **extra: str
) -> AnswerRecord:
    """Question ``index``'s answer with one more claim, citing the chunk that cuts it off."""
    claim, (a_id, a_source, a_text), (b_id, b_source, b_text) = OVERLAP_CHUNKS[index]
    record = answer(QUESTIONS[index], "correct", rid, first_passage_bug=first_passage_bug, **extra)
    record.passages += [
        Passage(id=a_id, text=a_text, source=a_source),
        Passage(id=b_id, text=b_text, source=b_source),
    ]
    record.answer = f"{record.answer} {claim[:-1]} [{a_id}]{claim[-1]}"
    record.labels = [
        *(record.labels or []),
        {"claim": claim, "cited_ids": [a_id], "verdict": "misattributed", "overlap": True},
    ]
    return record


def _pick(rng: random.Random, mix: Sequence[tuple[str, float]]) -> str:
    r = rng.random()
    for name, share in mix:
        r -= share
        if r < 0:
            return name
    return mix[0][0]


def review_traffic(*, per_version: int = 150, seed: int = 18) -> list[AnswerRecord]:
    """``per_version`` answers of v1, then of v2 (the first-passage bug), with the faults of
    :data:`REVIEW_FAULTS`; deterministic for a seed. IDs are ``<version>-<n>``."""
    rng = random.Random(seed)
    extra = {"service": "support-bot", "environment": "prod"}
    out: list[AnswerRecord] = []
    for version, mix in REVIEW_FAULTS.items():
        bug = version == "v2"
        for n in range(1, per_version + 1):
            rid = f"{version}-{n}"
            fault = _pick(rng, mix)
            if fault == "overlap":
                index = rng.choice(sorted(OVERLAP_CHUNKS))
                out.append(
                    overlap_answer(index, rid, first_passage_bug=bug, version=version, **extra)
                )
                continue
            question = rng.choice(QUESTIONS)
            if fault == "fused":
                out.append(
                    fused_answer(question, rid, first_passage_bug=bug, version=version, **extra)
                )
            else:
                out.append(
                    answer(question, fault, rid, first_passage_bug=bug, version=version, **extra)
                )
    return out


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _truths() -> tuple[dict[str, str], set[str], set[str], set[str]]:
    facts = {_norm(text): source for q in QUESTIONS for text, source in q.facts}
    hallucinations = {_norm(q.hallucination) for q in QUESTIONS}
    fused = {_norm(_fused_text(q)) for q in QUESTIONS}
    overlaps = {_norm(claim) for claim, _, _ in OVERLAP_CHUNKS.values()}
    return facts, hallucinations, fused, overlaps


_FACTS, _HALLUCINATIONS, _FUSED, _OVERLAPS = _truths()


def truth_label(text: str, cited_ids: Sequence[str]) -> tuple[str, str | None] | None:
    """What a careful reader labels the claim ``text`` citing ``cited_ids`` in the demo's
    traffic, as (label, checker cause): the values of a review label's ``label`` and
    ``checker``. A fact is ``entailed`` when it cites its own passage (``not_entailed``
    otherwise), a hallucination ``not_entailed``; a planted overlap claim is ``entailed`` (cause
    ``overlap``), a fused sentence ``not_a_claim`` (two claims cut as one; cause ``fused``).
    ``None`` for a claim the demo did not write."""
    key = _norm(text)
    if key in _OVERLAPS:
        return "entailed", "overlap"
    if key in _FUSED:
        return "not_a_claim", "fused"
    if key in _HALLUCINATIONS:
        return "not_entailed", None
    source = _FACTS.get(key)
    if source is None:
        return None
    return ("entailed" if source in cited_ids else "not_entailed"), None


assert all(pid not in PASSAGES for _, a, b in OVERLAP_CHUNKS.values() for pid in (a[0], b[0]))
