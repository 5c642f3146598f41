"""Totals over scored answers (:class:`Summary`) and the ``summary`` object ``citemon score``
and the self-tests print: the ratios of its :class:`~citemon._core.tally.Tally` (citation
accuracy and coverage with Wilson intervals, faithfulness, precision), rounded for output, and,
given a calibration, accuracy corrected for the judge's measured errors."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from citemon._core.records import PATTERNS, VERDICTS, AnswerScore, VerdictName
from citemon._core.tally import Tally
from citemon._engine.scoring import Policy

if TYPE_CHECKING:
    from citemon._core.calibration import Calibration

__all__ = ["Summary", "summarize"]


@dataclass(slots=True)
class Summary:
    """Totals over scored answers: the verdict mix and the :class:`~citemon._core.tally.Tally`
    every ratio is asked of (``unjudged`` is in no ratio)."""

    answers: int = 0
    claims: int = 0
    verdicts: dict[VerdictName, int] = field(default_factory=lambda: dict.fromkeys(VERDICTS, 0))
    tally: Tally = field(default_factory=Tally)
    patterns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PATTERNS, 0))
    """Misattributed claims by pattern (:mod:`citemon._engine.patterns`)."""

    def add(self, score: AnswerScore) -> None:
        self.answers += 1
        for c in score.claims:
            self.claims += 1
            self.verdicts[c.verdict] += 1
            self.tally.add(c)
            if c.verdict == "misattributed":
                self.patterns[c.pattern or "other"] += 1

    @property
    def cited_claims(self) -> int:
        return self.tally.cited

    @property
    def overlap_misattributions(self) -> int:
        return self.tally.overlap

    def as_dict(
        self, policy: Policy = "any_of", calibration: Calibration | None = None
    ) -> dict[str, Any]:
        """The ``summary`` object of the JSON output; with a calibration, corrected accuracy too."""
        t = self.tally
        return {
            "answers": self.answers,
            "claims": self.claims,
            "cited_claims": t.cited,
            "citation_accuracy": _round(t.citation_accuracy),
            "citation_accuracy_ci95": _interval(t.citation_accuracy_ci95),
            "citation_coverage": _round(t.citation_coverage),
            "citation_coverage_ci95": _interval(t.citation_coverage_ci95),
            "faithfulness": _round(t.faithfulness),
            "ids_per_claim": _round(t.ids_per_claim),
            "citation_precision": _round(t.citation_precision),
            "policy": policy,
            "overlap_misattributions": t.overlap,
            "misattribution_patterns": dict(self.patterns),
            "multi_hop_ceiling": _round(t.multi_hop_ceiling),
            "verdicts": dict(self.verdicts),
        } | (self._corrected(calibration) if calibration is not None else {})

    def _corrected(self, calibration: Calibration) -> dict[str, Any]:
        from citemon._core.calibration import corrected_accuracy

        got = corrected_accuracy(self.tally.correct, self.tally.cited, calibration)
        if got is None:
            return {"citation_accuracy_corrected": None, "citation_accuracy_corrected_ci95": None}
        point, (lo, hi) = got
        return {
            "citation_accuracy_corrected": round(point, 4),
            "citation_accuracy_corrected_ci95": [round(lo, 2), round(hi, 2)],
        }


def summarize(scores: Iterable[AnswerScore]) -> Summary:
    summary = Summary()
    for score in scores:
        summary.add(score)
    return summary


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _interval(bounds: tuple[float, float] | None) -> list[float] | None:
    return None if bounds is None else [round(bounds[0], 2), round(bounds[1], 2)]
