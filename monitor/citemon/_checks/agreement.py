"""How far a judge agrees with people, beyond the confusion matrix itself: Cohen's κ and the
95% intervals of κ and of balanced accuracy (a parametric bootstrap from Jeffreys posteriors,
fixed seed, so the interval carries the uncertainty of every count and is reproducible)."""

from __future__ import annotations

import random

from citemon._core.calibration import Confusion
from citemon._core.stats import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    cohen_kappa,
    jeffreys_draw,
    percentile_interval,
)

__all__ = ["balanced_accuracy_ci", "kappa", "kappa_ci"]


def kappa(c: Confusion) -> float | None:
    """Cohen's κ between judge and human; ``None`` when chance agreement is total."""
    return cohen_kappa(_pairs(c.tp, c.fn, c.tn, c.fp))


def _pairs(tp: float, fn: float, tn: float, fp: float) -> dict[tuple[bool, bool], float]:
    """The confusion matrix as (judge entailed, human entailed) → count."""
    return {(True, True): tp, (False, True): fn, (False, False): tn, (True, False): fp}


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
        drawn = cohen_kappa(_pairs(*(x / total for x in g)))  # the four cells' shares
        values.append(0.0 if drawn is None else drawn)
    return percentile_interval(values)
