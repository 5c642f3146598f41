"""The shuffle self-test (``citemon selftest``): a judge that is not reading the passages it is
shown cannot pass it.

Shuffling citation IDs between the sentences of an answer leaves the claims and the retrieved
context untouched, so faithfulness cannot move, while citation accuracy must fall for a judge that
checks *which* passage a claim cites. A judge that says "yes" to everything scores the shuffled
answers as well as the originals and fails.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from citemon._checks.shuffle import rotate_citations
from citemon._core.records import AnswerRecord
from citemon._engine.scoring import Scorer
from citemon._engine.summary import Summary

__all__ = ["ShuffleResult", "run_shuffle_selftest"]


@dataclass(frozen=True, slots=True)
class ShuffleResult:
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


async def run_shuffle_selftest(
    scorer: Scorer, records: Sequence[AnswerRecord], *, seed: int = 0
) -> ShuffleResult:
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
    return ShuffleResult(original=original, shuffled=shuffled)
