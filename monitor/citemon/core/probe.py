"""The shuffle probe's counts: what the online probe measures and the metrics export.

Kept below both :mod:`citemon.checks.shuffle_probe` (which runs the probe) and
:mod:`citemon.metrics` (which windows and exports it), so neither imports the other.
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

from citemon.core.records import AnswerScore

__all__ = [
    "PROBE_OUTCOMES",
    "CitedCounts",
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


class CitedCounts(NamedTuple):
    """Correct and cited (judged) claims: the numerator and denominator of citation accuracy."""

    correct: int
    cited: int


def cited_counts(score: AnswerScore) -> CitedCounts:
    """Counted as ``citemon_citation_accuracy`` counts them (``unjudged`` and ``uncited`` out)."""
    cited = [c for c in score.claims if c.verdict not in ("uncited", "unjudged")]
    return CitedCounts(sum(c.verdict == "correct" for c in cited), len(cited))


def probe_sensitivity(
    original_correct: float, original_cited: float, shuffled_correct: float, shuffled_cited: float
) -> float | None:
    """``(acc_original − acc_shuffled) / acc_original``; ``None`` when either accuracy is
    undefined or the original is 0 (a relative drop from nothing means nothing)."""
    if original_cited <= 0 or shuffled_cited <= 0 or original_correct <= 0:
        return None
    original = original_correct / original_cited
    return (original - shuffled_correct / shuffled_cited) / original
