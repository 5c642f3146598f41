"""Measuring the judge against human labels: the report a calibration file is written from.

Every citemon number is a judge's verdict. ``citemon calibrate`` says how far to trust it, in
four modules of :mod:`citemon._checks`:

* :mod:`~citemon._checks.labelled_pairs` turns labelled data into (claim, passages, human verdict)
  pairs (:func:`~citemon._checks.labelled_pairs.pairs_from_rows`);
* this module asks the judge about each pair (:func:`judge_pairs`) and compares judge and human
  (:func:`evaluate`): confusion matrix, sensitivity (entailed pairs the judge accepts),
  specificity (non-entailed pairs it rejects), balanced accuracy, Cohen's κ, each with a 95%
  interval, plus the worst disagreements for a person to read;
* :mod:`~citemon._checks.agreement` holds κ and the bootstrap intervals of κ and balanced
  accuracy; sensitivity and specificity use Wilson intervals (:func:`citemon._core.stats.wilson`);
* :mod:`~citemon._checks.threshold` ranks the pairs by P(entailed), for a judge that says what
  its confidence means (``confidence_means``): ROC AUC and the threshold that maximises balanced
  accuracy, with stratified-bootstrap intervals.

:class:`~citemon._core.calibration.Calibration` is the file ``citemon calibrate --output`` writes
from an :func:`evaluate` report; it and the correction it allows
(:func:`~citemon._core.calibration.corrected_accuracy`) live in :mod:`citemon._core.calibration`,
since ``score``, ``run`` and the metrics read it.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from citemon._checks.agreement import balanced_accuracy_ci, kappa, kappa_ci
from citemon._checks.labelled_pairs import LabelledPair
from citemon._checks.threshold import THRESHOLD_DRAWS, best_threshold, roc_auc, threshold_bootstrap
from citemon._core.calibration import Calibration, Confusion
from citemon._core.errors import JudgeError
from citemon._core.judge import Judge
from citemon._core.records import Verdict
from citemon._core.stats import BOOTSTRAP_DRAWS, wilson
from citemon.judges import entailment_score

__all__ = ["CalibrationReport", "Disagreement", "JudgedPair", "evaluate", "judge_pairs"]


# ---------------------------------------------------------------------------------------------
# Judging and evaluation


@dataclass(frozen=True)
class JudgedPair:
    pair: LabelledPair
    verdict: Verdict | None  # None: the judge failed (see error)
    error: str | None = None


async def judge_pairs(
    judge: Judge, pairs: Sequence[LabelledPair], *, max_inflight: int = 8
) -> list[JudgedPair]:
    """Ask ``judge`` about every pair, at most ``max_inflight`` at a time, in input order."""
    gate = asyncio.Semaphore(max_inflight)

    async def one(pair: LabelledPair) -> JudgedPair:
        async with gate:
            try:
                return JudgedPair(pair, await judge.entails(pair.claim, pair.passages))
            except JudgeError as exc:
                return JudgedPair(pair, None, f"{type(exc).__name__}: {exc}")

    return list(await asyncio.gather(*(one(p) for p in pairs)))


class Disagreement(BaseModel):
    claim: str
    passage_excerpt: str
    human_label: str
    human_entailed: bool
    judge_entailed: bool
    confidence: float | None
    reason: str | None
    source: str


class CalibrationReport(BaseModel):
    """What ``citemon calibrate --format json`` prints (plus the calibration it writes)."""

    judge: str
    data: str
    partial: str
    pairs: int
    confusion: Confusion
    sensitivity: float | None
    sensitivity_ci95: tuple[float, float] | None
    specificity: float | None
    specificity_ci95: tuple[float, float] | None
    balanced_accuracy: float | None
    balanced_accuracy_ci95: tuple[float, float] | None
    kappa: float | None
    kappa_ci95: tuple[float, float] | None
    skipped: dict[str, int]
    intervals: str = (
        "sensitivity/specificity: Wilson; balanced_accuracy/kappa: parametric bootstrap "
        f"(Jeffreys posteriors, {BOOTSTRAP_DRAWS} draws, fixed seed); roc_auc/threshold: "
        f"stratified bootstrap over the labelled pairs ({THRESHOLD_DRAWS} draws, fixed seed)"
    )
    disagreements: list[Disagreement] = []
    confidence_means: str | None = None
    """What the judge's confidence is ("entailed", "verdict"), or None: no ROC, no threshold."""
    scored_pairs: int = 0
    """Pairs whose verdict gave a P(entailed): the ones ROC AUC and the threshold rank."""
    roc_auc: float | None = None
    roc_auc_ci95: tuple[float, float] | None = None
    threshold: float | None = None
    threshold_ci95: tuple[float, float] | None = None
    threshold_confusion: Confusion | None = None
    """Verdicts re-decided at ``threshold`` (a pair without a P keeps the judge's verdict)."""
    threshold_sensitivity: float | None = None
    threshold_specificity: float | None = None
    threshold_balanced_accuracy: float | None = None

    def calibration(self, *, with_threshold: bool = True) -> Calibration:
        """The calibration file's content: at the chosen threshold when there is one (and
        ``with_threshold``), else at the judge's own verdicts."""
        if with_threshold and self.threshold is not None and self.threshold_confusion:
            calib = Calibration.from_confusion(
                self.threshold_confusion, judge=self.judge, data=self.data, partial=self.partial
            )
            return calib.model_copy(
                update={
                    "threshold": self.threshold,
                    "threshold_ci95": self.threshold_ci95,
                    "roc_auc": self.roc_auc,
                    "roc_auc_ci95": self.roc_auc_ci95,
                }
            )
        calib = Calibration.from_confusion(
            self.confusion, judge=self.judge, data=self.data, partial=self.partial
        )
        return calib.model_copy(update={"roc_auc": self.roc_auc, "roc_auc_ci95": self.roc_auc_ci95})


def _excerpt(claim: str, passages: Mapping[str, str], limit: int) -> str:
    """The passage sentence that shares most words with the claim, trimmed to ``limit`` chars:
    a person reading a disagreement needs the relevant bit, not a 100 kB page."""
    words = set(re.findall(r"\w+", claim.lower()))
    best, best_hits = "", -1
    for pid, text in passages.items():
        for sent in re.split(r"(?<=[.!?])\s+|\n+", text):
            hits = len(words & set(re.findall(r"\w+", sent.lower())))
            if hits > best_hits:
                best, best_hits = f"[{pid}] {sent.strip()}", hits
    return best if len(best) <= limit else best[: limit - 1] + "…"


def evaluate(
    judged: Sequence[JudgedPair],
    *,
    judge: str,
    data: str,
    partial: str,
    skipped: Mapping[str, int] | None = None,
    max_disagreements: int = 10,
    excerpt_chars: int = 300,
    confidence_means: str | None = None,
) -> CalibrationReport:
    """Compare verdicts with human labels; the worst disagreements come first (the judge's most
    confident wrong verdicts: those most likely to mislead a reader of the dashboard).

    With ``confidence_means`` (the judge's attribute) the pairs are also ranked by P(entailed):
    ROC AUC, the balanced-accuracy-maximising threshold, both with intervals, and the
    confusion matrix at that threshold.
    """
    skip: Counter[str] = Counter(skipped or {})
    usable = []
    for j in judged:
        if j.verdict is None:
            skip["judge failed"] += 1
        else:
            usable.append((j.pair, j.verdict))
    c = Confusion.from_pairs((p.entailed, v.entailed) for p, v in usable)
    wrong = [(p, v) for p, v in usable if p.entailed != v.entailed]
    wrong.sort(key=lambda pv: -(pv[1].confidence if pv[1].confidence is not None else 0.5))
    ranked = _ranking(usable, confidence_means)
    return CalibrationReport(
        judge=judge,
        data=data,
        partial=partial,
        pairs=c.n,
        confusion=c,
        sensitivity=c.sensitivity,
        sensitivity_ci95=wilson(c.tp, c.tp + c.fn),
        specificity=c.specificity,
        specificity_ci95=wilson(c.tn, c.tn + c.fp),
        balanced_accuracy=c.balanced_accuracy,
        balanced_accuracy_ci95=balanced_accuracy_ci(c),
        kappa=kappa(c),
        kappa_ci95=kappa_ci(c),
        skipped=dict(sorted(skip.items())),
        disagreements=[
            Disagreement(
                claim=p.claim,
                passage_excerpt=_excerpt(p.claim, p.passages, excerpt_chars),
                human_label=p.label,
                human_entailed=p.entailed,
                judge_entailed=v.entailed,
                confidence=v.confidence,
                reason=v.reason,
                source=p.source,
            )
            for p, v in wrong[:max_disagreements]
        ],
        confidence_means=confidence_means,
        **ranked,
    )


def _ranking(usable: Sequence[tuple[LabelledPair, Verdict]], means: str | None) -> dict[str, Any]:
    """The report's ROC and threshold fields (empty when the judge gives no P(entailed))."""
    probs = [entailment_score(means, v) for _, v in usable]
    scored = [(p.entailed, x) for (p, _), x in zip(usable, probs, strict=True) if x is not None]
    choice = best_threshold(scored)
    if choice is None:
        return {"scored_pairs": len(scored), "roc_auc": roc_auc(scored)}
    intervals = threshold_bootstrap(scored)
    at = Confusion.from_pairs(
        (p.entailed, v.entailed if x is None else x >= choice.threshold)
        for (p, v), x in zip(usable, probs, strict=True)
    )
    return {
        "scored_pairs": len(scored),
        "roc_auc": roc_auc(scored),
        "roc_auc_ci95": intervals[0] if intervals else None,
        "threshold": choice.threshold,
        "threshold_ci95": intervals[1] if intervals else None,
        "threshold_confusion": at,
        "threshold_sensitivity": at.sensitivity,
        "threshold_specificity": at.specificity,
        "threshold_balanced_accuracy": at.balanced_accuracy,
    }
