"""Ranking labelled pairs by the judge's P(entailed): the area under the ROC curve, the
threshold that maximises balanced accuracy, and their 95% intervals from a stratified bootstrap
over the pairs (for a judge that says what its confidence means: the classifier's entailment
score, the learned judge's verdict probability)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from citemon._core.stats import BOOTSTRAP_SEED, percentile_interval

__all__ = ["THRESHOLD_DRAWS", "ThresholdChoice", "best_threshold", "roc_auc", "threshold_bootstrap"]

THRESHOLD_DRAWS: Final = 1000
"""Draws of :func:`threshold_bootstrap` (about 4 s per 1,000 labelled pairs)."""


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
    draws: int = THRESHOLD_DRAWS,
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
