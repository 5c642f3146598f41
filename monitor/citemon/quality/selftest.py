"""The shuffle canary: a judge that is not reading the passages it is shown cannot pass it.

Shuffling citation IDs between the sentences of an answer leaves the claims and the retrieved
context untouched, so faithfulness cannot move, while citation accuracy must fall for a judge that
checks *which* passage a claim cites. A judge that says "yes" to everything scores the shuffled
answers as well as the originals and fails.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from citemon.engine.records import AnswerRecord, Claim
from citemon.engine.scoring import Scorer, Summary

__all__ = ["CanaryResult", "rotate_citations", "run_canary", "shuffle_citations"]


def shuffle_citations(claims: Sequence[Claim], order: Sequence[int]) -> list[Claim]:
    """Give the i-th cited claim the citations of cited claim ``order[i]`` (uncited stay so)."""
    cited = [i for i, c in enumerate(claims) if c.cited_ids]
    if sorted(order) != list(range(len(cited))):
        raise ValueError(f"order must be a permutation of range({len(cited)})")
    out = list(claims)
    for slot, source in zip(cited, order, strict=True):
        donor = claims[cited[source]]
        out[slot] = claims[slot].model_copy(
            update={"cited_ids": donor.cited_ids, "dangling_ids": donor.dangling_ids}
        )
    return out


def _derangement(n: int, rng: random.Random) -> list[int]:
    """A random permutation moving every element (the identity when n < 2)."""
    if n < 2:
        return list(range(n))
    shift = rng.randrange(1, n)
    return [(i + shift) % n for i in range(n)]


def rotate_citations(claims: Sequence[Claim], rng: random.Random) -> list[Claim] | None:
    """The claims with citations moved between cited sentences so none keeps its own, or
    ``None`` when that changes nothing: fewer than two distinct citation sets."""
    if len({tuple(c.cited_ids) for c in claims if c.cited_ids}) < 2:
        return None
    n_cited = sum(1 for c in claims if c.cited_ids)
    return shuffle_citations(claims, _derangement(n_cited, rng))


@dataclass(frozen=True, slots=True)
class CanaryResult:
    """Scores of the same answers with their own and with shuffled citations."""

    original: Summary
    shuffled: Summary

    def _get(self, which: Summary, key: str) -> float | None:
        value = which.as_dict()[key]
        return None if value is None else float(value)

    @property
    def accuracy_drop(self) -> float | None:
        a, b = (
            self._get(self.original, "citation_accuracy"),
            self._get(self.shuffled, "citation_accuracy"),
        )
        return None if a is None or b is None else a - b

    @property
    def faithfulness_shift(self) -> float | None:
        a, b = self._get(self.original, "faithfulness"), self._get(self.shuffled, "faithfulness")
        return None if a is None or b is None else b - a

    @property
    def sensitivity(self) -> float | None:
        """How far accuracy fell on shuffled citations, relative to unshuffled (0 = blind)."""
        a = self._get(self.original, "citation_accuracy")
        drop = self.accuracy_drop
        return None if not a or drop is None else drop / a

    def passed(self, *, min_drop: float = 0.05, max_faithfulness_shift: float = 0.02) -> bool:
        drop, shift = self.accuracy_drop, self.faithfulness_shift
        return (
            drop is not None
            and drop >= min_drop
            and shift is not None
            and abs(shift) <= max_faithfulness_shift
        )


async def run_canary(
    scorer: Scorer, records: Sequence[AnswerRecord], *, seed: int = 0
) -> CanaryResult:
    """Score each answer as it is and with its citations rotated between its cited sentences."""
    rng = random.Random(seed)
    original, shuffled = Summary(), Summary()
    for record in records:
        claims = await scorer.claims(record)
        moved = rotate_citations(claims, rng)
        if moved is None:
            continue  # nothing to shuffle: every cited sentence cites the same thing
        original.add(await scorer.score(record, claims))
        shuffled.add(await scorer.score(record, moved))
    return CanaryResult(original=original, shuffled=shuffled)
