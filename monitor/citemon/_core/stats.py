"""Interval and test maths, kept dependency-free (no scipy)."""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Mapping
from typing import TypeVar

__all__ = [
    "BOOTSTRAP_DRAWS",
    "BOOTSTRAP_SEED",
    "cohen_kappa",
    "jeffreys_draw",
    "msprt_p_value",
    "normal_cdf",
    "percentile_interval",
    "ratio",
    "two_proportion_variance",
    "two_proportion_z",
    "wilson",
]

Z95 = 1.959963984540054


def ratio(num: float, den: float) -> float | None:
    """``num / den``, or ``None`` when there is nothing to divide (never a fake 0 or 1)."""
    return num / den if den else None


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for a binomial proportion; ``None`` when ``n == 0``.

    Wilson rather than the normal approximation because monitored samples are often small and
    proportions near 0 or 1, where the normal interval leaves [0, 1] or collapses to a point.
    """
    if n <= 0:
        return None
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


_K = TypeVar("_K", bound=Hashable)


def cohen_kappa(pairs: Mapping[tuple[_K, _K], float]) -> float | None:
    """Cohen's κ (1960) from how often (or how large a share of the time) each pair of ratings
    occurred, ``{(first rater's, second rater's): count}``: κ = (p_o − p_e) / (1 − p_e), p_o
    the share both gave the same rating, p_e the share expected by chance from each rater's
    own rating frequencies. ``None`` when there is nothing rated or p_e = 1 (both raters gave
    one and the same rating to everything). Counts and shares give the same κ (it is scale-free).
    """
    n = sum(pairs.values())
    if n <= 0:
        return None
    first: dict[_K, float] = {}
    second: dict[_K, float] = {}
    for (a, b), count in pairs.items():
        first[a] = first.get(a, 0) + count
        second[b] = second.get(b, 0) + count
    observed = sum(count for (a, b), count in pairs.items() if a == b) / n
    chance = sum(first[k] * second.get(k, 0) for k in first) / (n * n)
    return None if chance >= 1.0 else (observed - chance) / (1.0 - chance)


def normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def two_proportion_z(s1: int, n1: int, s2: int, n2: int) -> tuple[float, float] | None:
    """Pooled two-proportion z-test of p2 - p1; returns (z, two-sided p), ``None`` if undefined."""
    if n1 <= 0 or n2 <= 0:
        return None
    pooled = (s1 + s2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return None
    z = (s2 / n2 - s1 / n1) / se
    return z, 2 * (1 - normal_cdf(abs(z)))


BOOTSTRAP_DRAWS = 4000
"""Draws of the parametric bootstraps (balanced accuracy, κ, corrected accuracy)."""
BOOTSTRAP_SEED = 20240601
"""Their fixed seed: an interval is reproducible run to run."""


def percentile_interval(values: list[float]) -> tuple[float, float]:
    """The 95% percentile interval of bootstrap draws (sorts ``values`` in place)."""
    values.sort()
    lo = values[int(0.025 * (len(values) - 1))]
    hi = values[round(0.975 * (len(values) - 1))]
    return lo, hi


def jeffreys_draw(rng: random.Random, successes: int, n: int) -> float:
    """One draw of a proportion from its Jeffreys posterior, Beta(s + ½, n − s + ½)."""
    return rng.betavariate(successes + 0.5, n - successes + 0.5)


def msprt_p_value(delta: float, variance: float, tau: float) -> float | None:
    """Always-valid p-value of "no difference" for an estimate ``delta`` with ``variance``.

    The mixture sequential probability ratio test (Robbins 1970; Johari, Koomen, Pekelis and
    Walsh, "Always valid inference", 2017, as used for A/B tests): the likelihood ratio of the
    normal approximation, mixed over effects drawn from N(0, ``tau``^2),

        Lambda = sqrt(V / (V + tau^2)) * exp(tau^2 delta^2 / (2 V (V + tau^2))),

    is a martingale under the null, so by Ville's inequality P(Lambda ever >= 1/alpha) <= alpha
    however often it is looked at while the sample grows. The p-value is ``min(1, 1/Lambda)``
    at this look (the running minimum over looks is the always-valid one: a gate that stops at
    the first look with p < alpha takes it implicitly). ``tau`` is the scale of the effects it
    is most sensitive to. ``None`` when the variance is 0 (nothing varies: nothing to test).
    """
    if variance <= 0:
        return None
    t2 = tau * tau
    log_lambda = 0.5 * math.log(variance / (variance + t2)) + t2 * delta * delta / (
        2 * variance * (variance + t2)
    )
    return 1.0 if log_lambda <= 0 else math.exp(-log_lambda)


def two_proportion_variance(s1: int, n1: int, s2: int, n2: int) -> float | None:
    """Pooled variance of p2 - p1 under "no difference"; ``None`` without claims."""
    if n1 <= 0 or n2 <= 0:
        return None
    pooled = (s1 + s2) / (n1 + n2)
    return pooled * (1 - pooled) * (1 / n1 + 1 / n2)
