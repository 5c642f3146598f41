"""Why a citation fails: the misattribution pattern of every ``misattributed`` claim, and the rate
at which chance alone produces each one (docs/why-citations-fail.md).

A pattern explains a verdict and never changes one: it is computed after every verdict of the
answer is final, from what the scorer already holds (retrieval positions, the answer's earlier
citations, passage sources and document-level metadata IDs, ``supported_by``), with no judge
call. A ``misattributed`` claim gets the first of these that holds (the order is the contract):

``off_by_one``
    The answer has two or more misattributed claims and one offset ``d`` (+1 or −1) fits them
    all: every passage each of them cites sits ``d`` retrieval positions after a passage that
    supports it. A post-processor or prompt that numbers passages from 0 shifts every citation
    by one; a single shifted claim is too common by chance (2/k) to name.
``first_retrieved``
    The claim cites exactly the top-ranked retrieved passage (position 1), and that passage
    does not support it: the generator cites the first ID in its prompt.
``previous_citation``
    The claim cites exactly the IDs (as a set) that the nearest cited claim of an earlier
    sentence cites: the generator repeats the ID it was reading a sentence ago. Claims of the
    same sentence (``--decompose llm`` parts) share its markers by construction and are not
    compared.
``same_document``
    A supporting passage is another chunk of a cited passage's document: both carry the same
    ``source``, or the same value under one of ``--passage-id-keys`` in their metadata (a value
    equal to the passage's own ID is a chunk ID, not a document's). Right document, wrong chunk.
``other``
    None of these.

Chance rates (:func:`chance_rates`, :func:`off_by_one_chance`) come from a model of random
mis-citation, derived exactly below and checked against a seeded simulation of this very
classifier in the tests. A version's mix is read against the baseline version's, not against
zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from citemon._core.records import PATTERNS, AnswerRecord, ClaimResult, MisattributionPattern

__all__ = [
    "GUIDE",
    "assign_patterns",
    "chance_rates",
    "documents",
    "off_by_one_chance",
    "pattern_counts",
]

_OFFSETS: Final = (1, -1)

GUIDE: Final[dict[MisattributionPattern, tuple[str, str]]] = {
    "off_by_one": (
        "the ID mapping (post-processing)",
        "number passages the way the citations are resolved (1-based positions, or the IDs "
        "themselves); check the code that maps [n] back to passages",
    ),
    "first_retrieved": (
        "the prompt / the generator",
        "ask for the ID of the passage each sentence comes from, not a citation per answer; a "
        "prompt change or a model that now cites the first ID by default",
    ),
    "previous_citation": (
        "the prompt / the generator",
        "ask for a citation per sentence from that sentence's passage; the model carries the "
        "last ID forward (often after a prompt or temperature change)",
    ),
    "same_document": (
        "the chunker / the index",
        "right document, wrong chunk: chunk boundaries or overlap changed, or cite documents; "
        "check the chunking and the IDs given to chunks",
    ),
    "other": (
        "read the claims",
        "no known pattern: read the examples with `citemon inspect --pattern other`",
    ),
}
"""Each pattern's likely owner and usual fix, as ``citemon inspect`` and the docs name them."""


def assign_patterns(
    results: Sequence[ClaimResult], record: AnswerRecord, id_keys: Sequence[str]
) -> None:
    """Set ``pattern`` on every ``misattributed`` result of one answer (in claim order), and
    clear it on every other. Touches nothing else."""
    order = list(record.passage_map())
    position = {p: i for i, p in enumerate(order)}
    docs = documents(record, id_keys)
    wrong = [r for r in results if r.verdict == "misattributed"]
    shifted = len(wrong) >= 2 and any(
        all(_shifted(r, d, order, position) for r in wrong) for d in _OFFSETS
    )
    before: frozenset[str] | None = None  # cited IDs of the last cited claim of earlier sentences
    sentence, last_here = -1, None
    for r in results:
        if r.sentence != sentence:
            before = last_here if last_here is not None else before
            sentence, last_here = r.sentence, None
        r.pattern = (
            _pattern(r, shifted, before, order, position, docs)
            if r.verdict == "misattributed"
            else None
        )
        if r.cited_ids:
            last_here = frozenset(r.cited_ids)


def _pattern(
    r: ClaimResult,
    shifted: bool,
    before: frozenset[str] | None,
    order: Sequence[str],
    position: Mapping[str, int],
    docs: Mapping[str, frozenset[str]],
) -> MisattributionPattern:
    cited = _cited(r, position)
    if shifted:
        return "off_by_one"
    if order and cited == [order[0]] and order[0] not in r.supported_by:
        return "first_retrieved"
    if before is not None and frozenset(r.cited_ids) == before:
        return "previous_citation"
    if any(
        docs.get(c, frozenset()) & docs.get(s, frozenset())
        for c in cited
        for s in r.supported_by
        if s != c
    ):
        return "same_document"
    return "other"


def _cited(r: ClaimResult, position: Mapping[str, int]) -> list[str]:
    """The retrieved passages the claim's citations named, once each, in citation order."""
    return list(dict.fromkeys(p for p in r.resolved_ids if p in position))


def _shifted(r: ClaimResult, d: int, order: Sequence[str], position: Mapping[str, int]) -> bool:
    """Every passage ``r`` cites sits ``d`` positions after a passage that supports it."""
    cited = _cited(r, position)
    support = set(r.supported_by)
    return bool(cited) and all(
        0 <= position[c] - d < len(order) and order[position[c] - d] in support for c in cited
    )


def documents(record: AnswerRecord, id_keys: Sequence[str]) -> dict[str, frozenset[str]]:
    """Passage ID → the IDs of the document it is a chunk of: its ``source`` and its metadata
    values under ``id_keys`` (a value equal to its own ID names the chunk, not a document).
    The first passage wins on duplicate IDs, as in :meth:`AnswerRecord.passage_map`."""
    out: dict[str, frozenset[str]] = {}
    for p in record.passages:
        if p.id in out:
            continue
        names = {f"source:{p.source}"} if p.source else set()
        for key in id_keys:
            value = (p.metadata or {}).get(key)
            usable = isinstance(value, (str, int)) and not isinstance(value, bool)
            if usable and str(value) not in ("", p.id):
                names.add(f"id:{value}")
        out[p.id] = frozenset(names)
    return out


def pattern_counts(patterns: Sequence[MisattributionPattern | None]) -> dict[str, int]:
    """``{pattern: count}`` over every pattern name (zeros included), in :data:`PATTERNS` order."""
    counts: dict[str, int] = dict.fromkeys(PATTERNS, 0)
    for p in patterns:
        if p is not None:
            counts[p] += 1
    return counts


def chance_rates(k: int) -> dict[MisattributionPattern, float]:
    """The pattern a *randomly* wrong citation gets, for ``k`` retrieved passages (k ≥ 2).

    The model: the claim is the answer's only misattributed one (so ``off_by_one``, which needs
    two, cannot hold); one passage supports it, at a uniformly random position of the ``k``;
    it cites one passage, uniformly random among the other ``k − 1``; the cited claim of the
    sentence before cites one passage at a uniformly random position, independently; no two
    retrieved passages share a document. Then the cited position ``c`` is uniform over the
    ``k`` positions (each is "not the supporter" with probability (k − 1)/k, then chosen with
    1/(k − 1)), and:

    * ``first_retrieved`` = P(c = 1) = 1/k;
    * ``previous_citation`` = P(c ≠ 1 and the previous citation q = c) = (k − 1)/k · 1/k;
    * ``same_document`` = 0 (with chunked documents it is the share of another chunk of the
      cited document among the supporters: a property of the chunker, read from the baseline);
    * ``other`` = the rest, 1 − 1/k − (k − 1)/k².

    With k = 3: 1/3, 2/9, 0, 4/9. Given that the support is *not* the first passage, a random
    wrong citation is ``first_retrieved`` with 1/(k − 1): half the time with three passages.
    """
    if k < 2:
        raise ValueError("a misattribution needs at least two retrieved passages")
    first = 1 / k
    previous = (k - 1) / (k * k)
    return {
        "off_by_one": 0.0,
        "first_retrieved": first,
        "previous_citation": previous,
        "same_document": 0.0,
        "other": 1 - first - previous,
    }


def off_by_one_chance(k: int, n: int) -> float:
    """P(an answer's ``n`` randomly wrong citations are ``off_by_one``), ``k`` passages.

    Each of the ``n`` claims has one supporter at a uniformly random position and cites one of
    the other ``k − 1`` uniformly, independently. Of the k(k − 1) equally likely (supporter,
    cited) pairs, k − 1 have cited = supporter + 1, so one claim has offset +1 with probability
    1/k, and −1 likewise; all ``n`` share +1 with k⁻ⁿ, and the two offsets exclude each other:
    2·k⁻ⁿ for n ≥ 2 (0 for a single claim). k = 3, n = 2: 2/9; k = 5, n = 2: 0.08.
    """
    if k < 2 or n < 0:
        raise ValueError("needs k ≥ 2 retrieved passages and n ≥ 0 claims")
    return 0.0 if n < 2 else 2.0 / k**n
