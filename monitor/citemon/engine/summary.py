"""Totals over scored answers (:class:`Summary`) and the ratios ``citemon score`` and the
self-tests print: citation accuracy and coverage with Wilson intervals, faithfulness, precision,
and, given a calibration, accuracy corrected for the judge's measured errors."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from citemon.core.records import CITED_VERDICTS, PATTERNS, VERDICTS, AnswerScore, VerdictName
from citemon.core.stats import multi_hop_ceiling, ratio, wilson
from citemon.engine.scoring import Policy

if TYPE_CHECKING:
    from citemon.core.calibration import Calibration

__all__ = ["Summary", "summarize"]


@dataclass(slots=True)
class Summary:
    """Totals over scored answers; ratios exclude ``unjudged`` everywhere."""

    answers: int = 0
    claims: int = 0
    verdicts: dict[VerdictName, int] = field(default_factory=lambda: dict.fromkeys(VERDICTS, 0))
    faithful: int = 0
    faithfulness_judged: int = 0
    cited_ids: int = 0
    correct_citations: int = 0
    irrelevant_citations: int = 0
    overlap_misattributions: int = 0
    patterns: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PATTERNS, 0))
    """Misattributed claims by pattern (:mod:`citemon.engine.patterns`)."""

    def add(self, score: AnswerScore) -> None:
        self.answers += 1
        for c in score.claims:
            self.claims += 1
            self.verdicts[c.verdict] += 1
            if c.faithful is not None:
                self.faithfulness_judged += 1
                self.faithful += c.faithful
            if c.verdict in CITED_VERDICTS:
                self.cited_ids += len(c.cited_ids)
            if c.verdict == "correct":
                self.correct_citations += len(c.cited_ids)
                self.irrelevant_citations += len(c.irrelevant_ids)
            self.overlap_misattributions += c.verdict == "misattributed" and c.overlap
            if c.verdict == "misattributed":
                self.patterns[c.pattern or "other"] += 1

    @property
    def cited_claims(self) -> int:
        return sum(n for v, n in self.verdicts.items() if v in CITED_VERDICTS)

    def as_dict(
        self, policy: Policy = "any_of", calibration: Calibration | None = None
    ) -> dict[str, Any]:
        """The ``summary`` object of the JSON output; with a calibration, corrected accuracy too."""
        cited, correct = self.cited_claims, self.verdicts["correct"]
        judged = cited + self.verdicts["uncited"]
        precise = self.correct_citations - self.irrelevant_citations
        return {
            "answers": self.answers,
            "claims": self.claims,
            "cited_claims": cited,
            "citation_accuracy": _round(ratio(correct, cited)),
            "citation_accuracy_ci95": _interval(correct, cited),
            "citation_coverage": _round(ratio(cited, judged)),
            "citation_coverage_ci95": _interval(cited, judged),
            "faithfulness": _round(ratio(self.faithful, self.faithfulness_judged)),
            "ids_per_claim": _round(ratio(self.cited_ids, cited)),
            "citation_precision": _round(ratio(precise, self.correct_citations)),
            "policy": policy,
            "overlap_misattributions": self.overlap_misattributions,
            "misattribution_patterns": dict(self.patterns),
            "multi_hop_ceiling": _round(multi_hop_ceiling(self.verdicts["multi_hop"], cited)),
            "verdicts": dict(self.verdicts),
        } | (self._corrected(calibration) if calibration is not None else {})

    def _corrected(self, calibration: Calibration) -> dict[str, Any]:
        from citemon.core.calibration import corrected_accuracy

        got = corrected_accuracy(self.verdicts["correct"], self.cited_claims, calibration)
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


def _interval(successes: int, n: int) -> list[float] | None:
    bounds = wilson(successes, n)
    return None if bounds is None else [round(bounds[0], 2), round(bounds[1], 2)]
