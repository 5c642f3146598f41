"""A fake RAG service with each of the citation bugs teams ship, for the pattern tests.

Every answer has three claims over five retrieved passages, each claim supported by exactly one
passage (an :class:`~tests.oracles.OracleJudge` knows which), and the bug decides what it cites:

* ``zero_based``: a post-processor numbers the passages from 0, so a claim whose support is at
  position *i* (1-based) carries ``[i-1]`` (a claim about the first passage cites ``[0]``, no
  passage at all: ``dangling``) → ``off_by_one``;
* ``first_passage``: every claim cites the top-ranked passage → ``first_retrieved``;
* ``carry_forward``: the first claim cites its passage, every later one repeats the citation
  before it → ``previous_citation``;
* ``sibling_chunk``: the middle claim cites the other chunk of the right document (positions
  2-3 and 4-5 are two chunks each of one document: ``source`` in even answers, a ``doc_id``
  metadata key in odd ones) → ``same_document``.

Each answer is built so that its bug's pattern is the one the rules give it (a bug can look
like an earlier pattern by chance: the first claim of ``carry_forward`` is never about the first
passage here, or ``first_retrieved`` would win), and :func:`planted` returns the pattern every
misattributed claim must get.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from citemon._core.records import AnswerRecord, MisattributionPattern, Passage
from tests.oracles import OracleJudge

__all__ = ["BUGS", "Planted", "buggy_answers", "oracle_for", "planted_judge", "span_passages"]

BUGS: Final[dict[str, MisattributionPattern]] = {
    "zero_based": "off_by_one",
    "first_passage": "first_retrieved",
    "carry_forward": "previous_citation",
    "sibling_chunk": "same_document",
}
K: Final = 5
_SIBLING: Final = {2: 3, 3: 2, 4: 5, 5: 4}
_NAMES: Final = {1: "amber", 2: "brass", 3: "cobalt", 4: "denim", 5: "ember"}


@dataclass
class Planted:
    record: AnswerRecord
    truth: dict[str, set[str]] = field(default_factory=dict)
    """Claim text → the one passage ID that supports it."""
    pattern: MisattributionPattern = "other"
    """What every misattributed claim of this answer must be classified as."""


def _passages(index: int, by_metadata: bool) -> list[Passage]:
    docs = {1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    out = []
    for pos in range(1, K + 1):
        doc = f"kb/topic-{index}/{docs[pos]}.md"
        out.append(
            Passage(
                id=f"t{index}-p{pos}",
                text=f"Topic {index} has the {_NAMES[pos]} property, says this passage.",
                source=None if by_metadata else doc,
                metadata={"doc_id": doc} if by_metadata else None,
            )
        )
    return out


def _answer(bug: str, index: int, rng: random.Random, version: str, service: str) -> Planted:
    passages = _passages(index, by_metadata=index % 2 == 1)
    if bug == "carry_forward":
        first = rng.choice(range(2, K + 1))
        support = [first, *rng.sample([p for p in range(1, K + 1) if p != first], 2)]
    elif bug == "sibling_chunk":
        middle = rng.choice(range(2, K + 1))
        rest = [p for p in range(1, K + 1) if p not in (middle, _SIBLING[middle])]
        before, after = rng.sample(rest, 2)
        support = [before, middle, after]
    else:
        support = rng.sample(range(1, K + 1), 3)
    sentences: list[str] = []
    truth: dict[str, set[str]] = {}
    cited_before = ""
    for n, pos in enumerate(support):
        claim = f"Topic {index} has the {_NAMES[pos]} property."
        truth[claim] = {passages[pos - 1].id}
        if bug == "zero_based":
            marker = f"[{pos - 1}]"
        elif bug == "first_passage":
            marker = f"[{passages[0].id}]"
        elif bug == "carry_forward":
            marker = cited_before or f"[{passages[pos - 1].id}]"
        elif n == 1:  # sibling_chunk
            marker = f"[{passages[_SIBLING[pos] - 1].id}]"
        else:
            marker = f"[{passages[pos - 1].id}]"
        cited_before = marker
        sentences.append(f"{claim} {marker}")
    record = AnswerRecord(
        id=f"{bug}-{index}",
        question=f"What about topic {index}?",
        answer=" ".join(sentences),
        passages=passages,
        service=service,
        version=version,
        environment="test",
    )
    return Planted(record, truth, BUGS[bug])


def buggy_answers(
    bug: str, n: int, *, seed: int = 0, version: str = "v-bug", service: str = "buggy-rag"
) -> Iterator[Planted]:
    """``n`` answers of the fake service with ``bug`` (one of :data:`BUGS`)."""
    if bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}")
    rng = random.Random(seed)
    for index in range(n):
        yield _answer(bug, index, rng, version, service)


def oracle_for(planted: list[Planted]) -> OracleJudge:
    """The judge that knows every planted answer's truth."""
    truth: dict[str, set[str]] = {}
    for p in planted:
        truth.update(p.truth)
    return OracleJudge(truth)


def span_passages(record: AnswerRecord) -> list[Mapping[str, Any]]:
    """The record's passages as the shim takes them (source and doc_id in the metadata)."""
    out = []
    for p in record.passages:
        meta = dict(p.metadata or {})
        if p.source:
            meta["source"] = p.source
        out.append({"id": p.id, "text": p.text, "metadata": meta})
    return out


def planted_judge() -> OracleJudge:
    """A zero-argument factory for ``--judge tests.buggy_rag:planted_judge``: knows the truth of
    every answer :func:`buggy_answers` makes (up to 500 per bug), whatever the seed — claim
    "Topic i has the X property." is supported by passage ``ti-p<X's position>`` alone."""
    return OracleJudge(
        {
            f"Topic {i} has the {name} property.": {f"t{i}-p{pos}"}
            for i in range(500)
            for pos, name in _NAMES.items()
        }
    )
