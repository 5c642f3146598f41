"""Measuring the judge against human labels: the numbers a calibration file holds.

Every citemon number is a judge's verdict. This module says how far to trust it:

* :func:`pairs_from_rows` turns labelled data (:mod:`citemon.core.human_labels`: WiCE pairs,
  ExpertQA answers with ``labels``) into (claim, passages, human verdict) pairs; ExpertQA's
  annotator claims are matched to citemon's own extracted claims so the judge sees the sentence
  it would see in production.
* :func:`evaluate` compares judge and human: confusion matrix, sensitivity (entailed pairs the
  judge accepts), specificity (non-entailed pairs it rejects), balanced accuracy, Cohen's κ, each
  with a 95% interval, plus the worst disagreements for a person to read.
* For a judge that says what its confidence means (``confidence_means``: the classifier's
  entailment score, the learned judge's verdict probability), :func:`roc_auc` and
  :func:`best_threshold` rank the pairs by P(entailed): the area under the ROC curve, and the
  threshold that maximises balanced accuracy, each with an interval from
  :func:`threshold_bootstrap` (a stratified bootstrap over the labelled pairs, seeded).
* :class:`~citemon.core.calibration.Calibration` is the file ``citemon calibrate --output``
  writes from an :func:`evaluate` report; it and the correction it allows
  (:func:`~citemon.core.calibration.corrected_accuracy`) live in :mod:`citemon.core.calibration`,
  since ``score``, ``run`` and the metrics read it.

Intervals: sensitivity and specificity use Wilson score intervals
(:func:`citemon.core.stats.wilson`). Balanced accuracy, κ and the corrected accuracy use a
parametric bootstrap with a fixed seed: each draw takes every proportion from its Jeffreys posterior
(Beta(s + ½, n − s + ½); for κ a Dirichlet over the four cells), so the interval carries the
uncertainty of every count involved and is reproducible run to run.

Why one module (about 500 lines): each function is a step of one measurement (labelled pairs
in, the judge's error rates with their intervals) and they share the bootstrap helpers. The
rows themselves are read by :mod:`citemon.core.human_labels`, as for training.
"""

from __future__ import annotations

import asyncio
import difflib
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from citemon.core.calibration import Calibration, Confusion
from citemon.core.errors import JudgeError
from citemon.core.human_labels import PartialMapping, human_labels
from citemon.core.judge import Judge
from citemon.core.records import Verdict
from citemon.core.stats import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    jeffreys_draw,
    percentile_interval,
    wilson,
)
from citemon.core.text import DEFAULT_SYNTAX, CitationSyntax, strip_markers
from citemon.judges import entailment_score

__all__ = [
    "CalibrationReport",
    "Disagreement",
    "JudgedPair",
    "LabelledPair",
    "ThresholdChoice",
    "balanced_accuracy_ci",
    "best_threshold",
    "evaluate",
    "judge_pairs",
    "kappa",
    "kappa_ci",
    "pairs_from_rows",
    "roc_auc",
    "threshold_bootstrap",
]


_THRESHOLD_DRAWS = 1000


# ---------------------------------------------------------------------------------------------
# Metrics


def kappa(c: Confusion) -> float | None:
    """Cohen's κ between judge and human; ``None`` when chance agreement is total."""
    n = c.n
    if not n:
        return None
    observed = (c.tp + c.tn) / n
    chance = ((c.tp + c.fp) * (c.tp + c.fn) + (c.fn + c.tn) * (c.fp + c.tn)) / (n * n)
    return None if chance >= 1.0 else (observed - chance) / (1.0 - chance)


def balanced_accuracy_ci(
    c: Confusion, *, draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float] | None:
    """95% interval for balanced accuracy (Jeffreys-posterior parametric bootstrap)."""
    pos, neg = c.tp + c.fn, c.tn + c.fp
    if not pos or not neg:
        return None
    rng = random.Random(seed)
    values = [
        (jeffreys_draw(rng, c.tp, pos) + jeffreys_draw(rng, c.tn, neg)) / 2 for _ in range(draws)
    ]
    return percentile_interval(values)


def kappa_ci(
    c: Confusion, *, draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float] | None:
    """95% interval for κ: draws of the four cell shares from Dirichlet(counts + ½)."""
    if kappa(c) is None:
        return None
    rng = random.Random(seed)
    values = []
    for _ in range(draws):
        g = [rng.gammavariate(x + 0.5, 1.0) for x in (c.tp, c.fn, c.tn, c.fp)]
        total = sum(g)
        tp, fn, tn, fp = (x / total for x in g)
        chance = (tp + fp) * (tp + fn) + (fn + tn) * (fp + tn)
        values.append((tp + tn - chance) / (1.0 - chance) if chance < 1.0 else 0.0)
    return percentile_interval(values)


# ---------------------------------------------------------------------------------------------
# Ranking by P(entailed): ROC AUC and the threshold


def roc_auc(scored: Sequence[tuple[bool, float]]) -> float | None:
    """Area under the ROC curve of (human entailed, P(entailed)) pairs: the chance that a random
    entailed pair scores above a random non-entailed one, ties counting one half (Mann–Whitney
    U over mid-ranks). ``None`` without both classes."""
    pos = sum(1 for e, _ in scored if e)
    neg = len(scored) - pos
    if not pos or not neg:
        return None
    ordered = sorted(scored, key=lambda es: es[1])
    rank_sum = 0.0
    i = 0
    while i < len(ordered):
        j = i
        while j < len(ordered) and ordered[j][1] == ordered[i][1]:
            j += 1
        mid_rank = (i + 1 + j) / 2  # ranks i+1 … j share their mean
        rank_sum += mid_rank * sum(1 for e, _ in ordered[i:j] if e)
        i = j
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


@dataclass(frozen=True)
class ThresholdChoice:
    """The rule "entailed iff P(entailed) >= ``threshold``" that maximises balanced accuracy."""

    threshold: float
    balanced_accuracy: float
    sensitivity: float
    specificity: float


def best_threshold(scored: Sequence[tuple[bool, float]]) -> ThresholdChoice | None:
    """The cut that maximises balanced accuracy over (human entailed, P(entailed)) pairs.

    Every distinct score ``s`` is tried as the rule "entailed iff score >= s"; the best (the
    highest such ``s`` on a tie: the fewer pairs called entailed) is reported as the midpoint
    between ``s`` and the next lower distinct score (``s`` itself when none is lower), which
    classifies these pairs identically and sits as far from both as they allow. ``None``
    without both classes.
    """
    pos = sum(1 for e, _ in scored if e)
    neg = len(scored) - pos
    if not pos or not neg:
        return None
    ordered = sorted(scored, key=lambda es: -es[1])
    distinct = sorted({sc for _, sc in scored}, reverse=True)
    best: tuple[float, int, int, int] | None = None  # (ba, index into distinct, tp, tn)
    tp = fp = 0
    i = 0
    for k, cut in enumerate(distinct):
        while i < len(ordered) and ordered[i][1] >= cut:
            tp += ordered[i][0]
            fp += not ordered[i][0]
            i += 1
        ba = (tp / pos + (neg - fp) / neg) / 2
        if best is None or ba > best[0]:
            best = (ba, k, tp, neg - fp)
    assert best is not None
    ba, k, tp_best, tn_best = best
    cut = distinct[k]
    threshold = (cut + distinct[k + 1]) / 2 if k + 1 < len(distinct) else cut
    return ThresholdChoice(threshold, ba, tp_best / pos, tn_best / neg)


def threshold_bootstrap(
    scored: Sequence[tuple[bool, float]],
    *,
    draws: int = _THRESHOLD_DRAWS,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """95% intervals of (ROC AUC, best threshold): a stratified bootstrap over the labelled
    pairs (each draw resamples the entailed and the non-entailed pairs with replacement, keeping
    both counts), ``draws`` draws with a fixed ``seed`` so a run is reproducible."""
    pos = [sc for e, sc in scored if e]
    neg = [sc for e, sc in scored if not e]
    if not pos or not neg:
        return None
    rng = random.Random(seed)
    aucs: list[float] = []
    cuts: list[float] = []
    for _ in range(draws):
        sample = [(True, rng.choice(pos)) for _ in pos] + [(False, rng.choice(neg)) for _ in neg]
        auc = roc_auc(sample)
        choice = best_threshold(sample)
        assert auc is not None and choice is not None  # both classes by construction
        aucs.append(auc)
        cuts.append(choice.threshold)
    return percentile_interval(aucs), percentile_interval(cuts)


# ---------------------------------------------------------------------------------------------
# Labelled data


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

    The rows and labels are read by :func:`citemon.core.human_labels.human_labels` (both shapes,
    the label mappings, the skip reasons). An ExpertQA annotator claim is then matched
    (normalised text, then similarity ≥ ``min_similarity``) to a claim of
    :func:`citemon.engine.claims.extract_claims`, so the judge sees the sentence it would see in
    production, judged against the passages the label cites. Citation markers (in the answer and
    the annotator claims) are read with ``syntax``. Reading stops once ``limit`` pairs are
    collected.
    """
    from citemon.engine.claims import extract_claims  # the claim splitter is only needed here

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
        f"stratified bootstrap over the labelled pairs ({_THRESHOLD_DRAWS} draws, fixed seed)"
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
