"""Review tasks: one per cited claim of a review set, as a reviewer sees it (blind).

A task carries what the reviewer reads — the question, the answer split around the claim, the
claim, its cited passages with the words the claim shares marked — and nothing of citemon's
verdict: the verdict stays with the :class:`ReviewSet` and is revealed only once the reviewer has
given their label (no anchoring). The review page and the Label Studio export both build on this.

Texts are kept as plain strings cut into segments (``[text, marked]``); whoever renders them
treats every segment as data (the page builds DOM nodes with ``textContent``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from citemon._core.errors import InputError
from citemon._core.records import VerdictName
from citemon._review.model import (
    CheckerCause,
    Label,
    LabelName,
    ReviewClaim,
    ReviewRecord,
    read_review_records,
)

__all__ = [
    "ReviewSet",
    "ReviewTask",
    "Segment",
    "TaskKey",
    "disagrees",
    "load_review_set",
    "marked_segments",
    "shared_words",
]

TaskKey = tuple[str, int]
"""``(trace_id, claim)``: the key of a task and of its labels."""

Segment = tuple[str, bool]
"""A piece of text and whether it is marked (a word the claim shares)."""

_WORD: Final = re.compile(r"\w+", re.UNICODE)
_STOPWORD_TEXT: Final = """a about above after again against all also am an and any are as at be
because been before being below between both but by can could did do does doing down during each
few for from further had has have having he her here hers him his how i if in into is it its
itself just me more most my no nor not now of off on once only or other our ours out over own same
she should so some such than that the their theirs them then there these they this those through
to too under until up very was we were what when where which while who whom why will with would
you your yours"""
_STOPWORDS: Final = frozenset(_STOPWORD_TEXT.split())


def _content(word: str) -> bool:
    return word.isdigit() or (len(word) > 2 and word not in _STOPWORDS)


def shared_words(claim: str) -> frozenset[str]:
    """The claim's content words, lower-cased (no stop words; numbers kept)."""
    return frozenset(w for w in (m.lower() for m in _WORD.findall(claim)) if _content(w))


def marked_segments(text: str, words: frozenset[str]) -> list[Segment]:
    """``text`` cut into segments, the words in ``words`` marked; joining the segments gives
    ``text`` back exactly."""
    out: list[Segment] = []
    last = 0
    for m in _WORD.finditer(text):
        if m.group().lower() not in words:
            continue
        if m.start() > last:
            out.append((text[last : m.start()], False))
        if out and out[-1][1] and m.start() == last:
            out[-1] = (out[-1][0] + m.group(), True)
        else:
            out.append((m.group(), True))
        last = m.end()
    if last < len(text):
        out.append((text[last:], False))
    return out


def disagrees(label: LabelName, verdict: VerdictName) -> bool:
    """Whether a reviewer's label contradicts citemon's verdict, so the page asks why.

    ``correct`` agrees with ``entailed``; a failed citation (``misattributed``, ``multi_hop``,
    ``unsupported``, ``dangling``) agrees with ``partial`` and ``not_entailed`` (partial support
    does not pass the citation check); ``not_a_claim`` always disagrees (the extractor cut it);
    ``unjudged`` has no verdict to disagree with."""
    if verdict in ("unjudged", "uncited"):
        return False
    if label == "not_a_claim":
        return True
    if verdict == "correct":
        return label != "entailed"
    return label == "entailed"


@dataclass(frozen=True, slots=True)
class ReviewTask:
    """One cited claim as the reviewer sees it, without citemon's verdict."""

    trace_id: str
    claim: int
    question: str
    claim_text: str
    answer: tuple[Segment, ...]
    """The answer, with the claim's sentence marked where it can be found."""
    passages: tuple[tuple[str, tuple[Segment, ...], bool], ...]
    """``(passage ID, text segments, cut at the cap)`` for each cited passage, in citation order;
    a cited ID the record has no text for has no segments."""

    @property
    def key(self) -> TaskKey:
        return (self.trace_id, self.claim)

    def to_json(self) -> dict[str, object]:
        return {
            "trace_id": self.trace_id,
            "claim": self.claim,
            "question": self.question,
            "claim_text": self.claim_text,
            "answer": [list(s) for s in self.answer],
            "passages": [
                {"id": pid, "segments": [list(s) for s in segs], "cut": cut, "missing": not segs}
                for pid, segs, cut in self.passages
            ],
        }


_GAP: Final = r"(?:\[[^\]]{0,80}\]|[^\w\[]|_){0,80}?"
"""Between two of the claim's words in the answer: spaces, punctuation, citation markers."""
_TAIL: Final = re.compile(r"(?:\s*\[[^\]]{0,80}\])*\s*[.!?]?(?:\s*\[[^\]]{0,80}\])*")


def _answer_segments(answer: str, claim: str) -> tuple[Segment, ...]:
    """The answer with the claim's sentence marked: the claim's words in order, with anything
    between them that is not a word (the citation markers the claim was stripped of)."""
    words = _WORD.findall(claim)
    found = (
        re.search(_GAP.join(re.escape(w) for w in words), answer, re.IGNORECASE) if words else None
    )
    if found is None:
        return ((answer, False),) if answer else ()
    tail = _TAIL.match(answer, found.end())
    end = tail.end() if tail else found.end()
    pieces = [(answer[: found.start()], False), (answer[found.start() : end], True),
              (answer[end:], False)]  # fmt: skip
    return tuple(p for p in pieces if p[0])


def _task(record: ReviewRecord, claim: ReviewClaim) -> ReviewTask:
    words = shared_words(claim.text)
    passages = tuple(
        (
            pid,
            tuple(marked_segments(record.passages[pid], words)) if pid in record.passages else (),
            pid in record.passages_cut,
        )
        for pid in claim.cited_ids
    )
    return ReviewTask(
        trace_id=record.trace_id,
        claim=claim.claim,
        question=record.question,
        claim_text=claim.text,
        answer=_answer_segments(record.answer, claim.text),
        passages=passages,
    )


@dataclass(frozen=True, slots=True)
class ReviewSet:
    """The tasks of a review set, in file order, and what is revealed after each label."""

    records: tuple[ReviewRecord, ...]
    tasks: tuple[ReviewTask, ...]
    claims: dict[TaskKey, tuple[ReviewRecord, ReviewClaim]]

    @classmethod
    def of(cls, records: Iterable[ReviewRecord]) -> ReviewSet:
        kept = tuple(records)
        tasks: list[ReviewTask] = []
        claims: dict[TaskKey, tuple[ReviewRecord, ReviewClaim]] = {}
        for record in kept:
            for claim in record.claims:
                if not claim.cited_ids:
                    continue  # an uncited claim has no citation to review
                key = (record.trace_id, claim.claim)
                if key in claims:
                    raise InputError(
                        f"claim {claim.claim} of trace {record.trace_id} appears twice in the set"
                    )
                claims[key] = (record, claim)
                tasks.append(_task(record, claim))
        return cls(records=kept, tasks=tuple(tasks), claims=claims)

    def verdict(self, key: TaskKey) -> ReviewClaim:
        try:
            return self.claims[key][1]
        except KeyError:
            raise InputError(f"no cited claim {key[1]} of trace {key[0]} in the set") from None

    def label(
        self,
        key: TaskKey,
        label: LabelName,
        checker: CheckerCause | None,
        reviewer: str,
        labelled_at: str | None = None,
    ) -> Label:
        """The :class:`Label` a reviewer gives ``key``, with the claim's text, cited IDs, verdict
        and the answer's service and version filled in from the set."""
        record, claim = self.claims.get(key, (None, None))
        if record is None or claim is None:
            raise InputError(f"no cited claim {key[1]} of trace {key[0]} in the set")
        extra = {"labelled_at": labelled_at} if labelled_at else {}
        return Label(
            trace_id=record.trace_id,
            claim=claim.claim,
            text=claim.text,
            cited_ids=list(claim.cited_ids),
            label=label,
            checker=checker,
            reviewer=reviewer,
            verdict=claim.verdict,
            service=record.service,
            version=record.version,
            **extra,
        )


def load_review_set(path: Path) -> ReviewSet:
    """The review set in ``path``; a file that holds no review records, or no cited claim, is an
    :class:`InputError` that says so."""
    records: Sequence[ReviewRecord] = read_review_records(path)
    if not records:
        raise InputError(f"{path}: no review records (expected JSON lines of review records)")
    review_set = ReviewSet.of(records)
    if not review_set.tasks:
        raise InputError(
            f"{path}: no review record in it has a cited claim to review (a review set is what "
            "`citemon review pull` writes)"
        )
    return review_set
