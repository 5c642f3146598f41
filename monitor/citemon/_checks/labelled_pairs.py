"""Labelled data as (claim, passages, human verdict) pairs for the judge to be measured on.

The rows and their labels are read by :mod:`citemon._core.human_labels` (WiCE pairs, ExpertQA
answers with ``labels``); an ExpertQA annotator claim is matched to one of citemon's own
extracted claims so the judge sees the sentence it would see in production.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from citemon._core.human_labels import PartialMapping, human_labels
from citemon._core.text import DEFAULT_SYNTAX, CitationSyntax, strip_markers

__all__ = ["LabelledPair", "pairs_from_rows"]


@dataclass(frozen=True)
class LabelledPair:
    """A claim, the passages it cites (ID → text), and the human verdict."""

    claim: str
    passages: dict[str, str]
    entailed: bool
    label: str  # as written in the data
    source: str  # where it came from (line number, answer ID)


def _normalise(text: str, syntax: CitationSyntax) -> str:
    return " ".join(strip_markers(text, syntax).lower().split()).strip(" .")


def _match(
    text: str, claims: Sequence[str], min_similarity: float, syntax: CitationSyntax
) -> int | None:
    target = _normalise(text, syntax)
    normalised = [_normalise(c, syntax) for c in claims]
    if target in normalised:
        return normalised.index(target)
    best, best_i = 0.0, None
    for i, cand in enumerate(normalised):
        matcher = difflib.SequenceMatcher(None, target, cand, autojunk=False)
        if matcher.real_quick_ratio() < min_similarity or matcher.quick_ratio() < min_similarity:
            continue
        score = matcher.ratio()
        if score > best:
            best, best_i = score, i
    return best_i if best >= min_similarity else None


def pairs_from_rows(
    rows: Iterable[Mapping[str, Any]],
    *,
    partial: PartialMapping = "not_entailed",
    min_similarity: float = 0.9,
    limit: int | None = None,
    syntax: CitationSyntax = DEFAULT_SYNTAX,
) -> tuple[list[LabelledPair], Counter[str]]:
    """Labelled pairs from rows of either shape, and the count of what was skipped, by reason.

    The rows and labels are read by :func:`citemon._core.human_labels.human_labels` (both shapes,
    the label mappings, the skip reasons). An ExpertQA annotator claim is then matched
    (normalised text, then similarity ≥ ``min_similarity``) to a claim of
    :func:`citemon._engine.claims.extract_claims`, so the judge sees the sentence it would see in
    production, judged against the passages the label cites. Citation markers (in the answer and
    the annotator claims) are read with ``syntax``. Reading stops once ``limit`` pairs are
    collected.
    """
    from citemon._engine.claims import extract_claims  # the claim splitter is only needed here

    pairs: list[LabelledPair] = []
    skipped: Counter[str] = Counter()
    claims_of: dict[int, list[str]] = {}  # id(record) → its extracted claims, once per answer
    for got in human_labels(rows, partial=partial):
        if limit is not None and len(pairs) >= limit:
            break
        if isinstance(got, str):
            skipped[got] += 1
            continue
        where = f"line {got.line}"
        if got.record is None:  # a WiCE pair: the claim is the one judged
            pairs.append(LabelledPair(got.claim, got.passages, got.entailed, got.label, where))
            continue
        record = got.record
        if id(record) not in claims_of:
            claims_of.clear()  # labels arrive answer by answer
            claims_of[id(record)] = [c.text for c in extract_claims(record, syntax)]
        claims = claims_of[id(record)]
        index = _match(got.claim, claims, min_similarity, syntax)
        if index is None:
            skipped["no matching extracted claim"] += 1
            continue
        pairs.append(
            LabelledPair(claims[index], got.passages, got.entailed, got.label, record.id or where)
        )
    return pairs[:limit] if limit is not None else pairs, skipped
