"""The shuffle probe's counts: what the online probe measures and the metrics export.

Kept below both :mod:`citemon._checks.shuffle_probe` (which runs the probe) and
:mod:`citemon._metrics` (which windows and exports it), so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from citemon._core.records import AnswerScore
from citemon._core.tally import Tally

__all__ = [
    "PROBE_OUTCOMES",
    "ProbeCounts",
    "ProbeOutcome",
    "cited_counts",
    "probe_sensitivity",
]

ProbeOutcome = Literal["scored", "skipped", "failed", "dropped"]
"""What became of an answer picked for the shuffle probe.

``scored``: both scores counted in the window. ``skipped``: nothing to shuffle (fewer than two
distinct citation sets). ``failed``: the judge failed on either score, or was down. ``dropped``:
too many probes already in flight.
"""

PROBE_OUTCOMES: Final[tuple[ProbeOutcome, ...]] = ("scored", "skipped", "failed", "dropped")


def cited_counts(score: AnswerScore) -> Tally:
    """The correct and cited claims of a score, and nothing else: what the probe compares, and
    all its shuffled side (:func:`~citemon._checks.shuffle_probe.shuffled_check`) can count."""
    whole = Tally.of(score.claims)
    return Tally(correct=whole.correct, cited=whole.cited)


def probe_sensitivity(original: Tally, shuffled: Tally) -> float | None:
    """``(acc_original − acc_shuffled) / acc_original``; ``None`` when either accuracy is
    undefined or the original is 0 (a relative drop from nothing means nothing)."""
    before, after = original.citation_accuracy, shuffled.citation_accuracy
    if before is None or after is None or before <= 0:
        return None
    return (before - after) / before


@dataclass(frozen=True, slots=True)
class ProbeCounts:
    """The probe's pair, summed over its window: the answers as cited and shuffled."""

    original: Tally
    shuffled: Tally

    def __add__(self, other: ProbeCounts) -> ProbeCounts:
        return ProbeCounts(self.original + other.original, self.shuffled + other.shuffled)

    @property
    def sensitivity(self) -> float | None:
        return probe_sensitivity(self.original, self.shuffled)
