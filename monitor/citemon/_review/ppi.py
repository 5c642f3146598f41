"""Prediction-powered inference (PPI++) for a mean, with intervals clustered by answer.

People label a few claims; the judge has a verdict on every claim. PPI (Angelopoulos et al.,
*Science* 2023) estimates the share of claims people would call supported from both, and stays
unbiased however wrong the judge is: the judge's mean over the unlabelled claims, corrected by
the mean of (label − verdict) over the labelled ones. PPI++ (Angelopoulos, Duchi & Zrnic 2023)
weighs the verdicts by a power-tuning ``λ`` ∈ [0, 1] chosen to make the interval narrowest:
λ = 0 is the human-only estimate, λ = 1 plain PPI::

    θ̂ = λ · mean(f over unlabelled) + mean(y − λ·f over labelled)

With every claim its own cluster this is exactly ``ppi_py.ppi_mean_pointestimate`` and its
interval ``ppi_py.ppi_mean_ci`` (a test checks both to 1e-6): λ is ``ppi_py``'s choice,
``cov(y, f) / ((1 + n/N) · var(f))`` (covariance over the labelled claims divided by n, variance
of all verdicts with n + N − 1), and each part's standard error is its claim-level standard
deviation (divided by its count) over √count.

**Clustered by answer.** Claims of one answer are labelled together and are not independent
(one answer, one retrieval, one reviewer's mood), so treating them as independent makes
intervals too narrow. Each mean above is a ratio of per-answer sums to per-answer claim
counts; its variance is the usual linearised (cluster-robust) one,
``Σ_j (S_j − θ̂·m_j)² / (Σ_j m_j)²`` over answers j with sum S_j of m_j claims, which is the
claim-level ``var/n`` above when every answer has one claim. With clusters, λ is the one that
minimises that clustered variance (:func:`clustered_power_tuning`: PPI++'s power tuning applied
to the variance actually reported, so the interval is never wider than the labels' alone). The
labelled and unlabelled claims must come from different answers (an answer with a label is a
labelled answer), so the two parts are independent and their variances add.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from citemon._core.stats import wilson

__all__ = [
    "MeanEstimate",
    "PPIEstimate",
    "clustered_mean",
    "clustered_power_tuning",
    "clustered_ratio",
    "ppi_mean",
]


@dataclass(frozen=True, slots=True)
class MeanEstimate:
    """A mean (or ratio) with its standard error and ``1 − alpha`` normal interval, clipped to
    [0, 1] when ``clip`` (the estimates here are proportions)."""

    estimate: float
    se: float
    ci: tuple[float, float]
    n: int
    """Observations (claims) behind the estimate."""
    clusters: int


@dataclass(frozen=True, slots=True)
class PPIEstimate:
    """PPI++'s estimate and what the labels alone would say, on the same labels."""

    ppi: MeanEstimate
    human: MeanEstimate
    lam: float
    labelled: int
    unlabelled: int
    effective_labels: float | None
    """How many labels the human-only estimate would need for PPI++'s standard error:
    ``labelled · (se_human / se_ppi)²``; ``None`` when either is 0."""


def _z(alpha: float) -> float:
    return NormalDist().inv_cdf(1 - alpha / 2)


def _interval(est: float, se: float, alpha: float, clip: bool) -> tuple[float, float]:
    lo, hi = est - _z(alpha) * se, est + _z(alpha) * se
    return (max(0.0, lo), min(1.0, hi)) if clip else (lo, hi)


def clustered_ratio(
    numerators: Sequence[float],
    denominators: Sequence[float],
    *,
    alpha: float = 0.05,
    clip: bool = True,
) -> MeanEstimate | None:
    """Σ numerators / Σ denominators over clusters (one entry each), with the linearised
    cluster-robust standard error ``√Σ(S_j − r·m_j)² / Σm_j``; ``None`` with no denominator.
    A proportion of exactly 0 or 1 (standard error 0) gets Wilson's interval over the clusters
    rather than a point."""
    if len(numerators) != len(denominators):
        raise ValueError("one numerator per denominator")
    total = sum(denominators)
    if total <= 0:
        return None
    ratio = sum(numerators) / total
    se = (
        math.sqrt(sum((s - ratio * m) ** 2 for s, m in zip(numerators, denominators, strict=True)))
        / total
    )
    ci = _interval(ratio, se, alpha, clip)
    if clip and se == 0.0 and ratio in (0.0, 1.0):
        # Every answer all-or-nothing the same way: the normal interval collapses to a point.
        # Say what that many answers can show instead: Wilson's interval, one answer counted
        # as one observation (conservative: an answer holds at least one claim).
        k = len(denominators)
        ci = wilson(round(ratio * k), k, _z(alpha)) or ci
    return MeanEstimate(ratio, se, ci, int(total), len(denominators))


def _sums(
    values: Sequence[float], clusters: Sequence[Hashable] | None
) -> tuple[list[float], list[float]]:
    """Per-cluster sums and counts (every value its own cluster without ``clusters``)."""
    if clusters is None:
        return list(values), [1.0] * len(values)
    if len(clusters) != len(values):
        raise ValueError("one cluster per value")
    sums: dict[Hashable, list[float]] = {}
    for value, cluster in zip(values, clusters, strict=True):
        acc = sums.setdefault(cluster, [0.0, 0.0])
        acc[0] += value
        acc[1] += 1.0
    return [s for s, _ in sums.values()], [m for _, m in sums.values()]


def clustered_mean(
    values: Sequence[float],
    clusters: Sequence[Hashable] | None = None,
    *,
    alpha: float = 0.05,
    clip: bool = True,
) -> MeanEstimate | None:
    """The mean of ``values`` with an interval clustered by ``clusters`` (parallel to it)."""
    sums, counts = _sums(values, clusters)
    return clustered_ratio(sums, counts, alpha=alpha, clip=clip)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def power_tuning(y: Sequence[float], f: Sequence[float], f_unlabelled: Sequence[float]) -> float:
    """``ppi_py``'s λ for a mean: ``cov(y, f) / ((1 + n/N) · var(f ∪ f_unlabelled))``, clipped
    to [0, 1]; 0 when it is undefined (no unlabelled claims, or verdicts that never vary)."""
    n, big_n = len(y), len(f_unlabelled)
    pooled = [*f, *f_unlabelled]
    if n == 0 or big_n == 0 or len(pooled) < 2:
        return 0.0
    my, mf, mp = _mean(y), _mean(f), _mean(pooled)
    cov = sum((a - my) * (b - mf) for a, b in zip(y, f, strict=True)) / n
    var = sum((b - mp) ** 2 for b in pooled) / (len(pooled) - 1)
    if var <= 0:
        return 0.0
    return min(1.0, max(0.0, cov / ((1 + n / big_n) * var)))


def clustered_power_tuning(
    y: Sequence[float],
    f: Sequence[float],
    f_unlabelled: Sequence[float],
    clusters: Sequence[Hashable] | None,
    clusters_unlabelled: Sequence[Hashable] | None,
) -> float:
    """The λ ∈ [0, 1] that minimises the clustered variance :func:`ppi_mean` reports.

    With per-answer centred sums ``a_j = Σy − ȳ·m_j`` and ``b_j = Σf − f̄·m_j`` over the
    labelled answers (M claims) and ``c_k`` likewise over the unlabelled ones (M_u claims), the
    variance is ``(Σ(a_j − λ·b_j)²) / M² + λ²·Σc_k² / M_u²``, least at
    ``λ = (Σa_j·b_j / M²) / (Σb_j² / M² + Σc_k² / M_u²)``. Clustering can make claim-level
    tuning choose a λ whose clustered interval is wider than the labels' alone; this cannot.
    """
    y_sums, counts = _sums(y, clusters)
    f_sums, _ = _sums(f, clusters)
    u_sums, u_counts = _sums(f_unlabelled, clusters_unlabelled)
    big_m, big_mu = sum(counts), sum(u_counts)
    if not big_m or not big_mu:
        return 0.0
    y_bar, f_bar, u_bar = sum(y_sums) / big_m, sum(f_sums) / big_m, sum(u_sums) / big_mu
    a = [s - y_bar * m for s, m in zip(y_sums, counts, strict=True)]
    b = [s - f_bar * m for s, m in zip(f_sums, counts, strict=True)]
    c = [s - u_bar * m for s, m in zip(u_sums, u_counts, strict=True)]
    num = sum(x * z for x, z in zip(a, b, strict=True)) / big_m**2
    den = sum(z * z for z in b) / big_m**2 + sum(z * z for z in c) / big_mu**2
    if den <= 0:
        return 0.0
    return min(1.0, max(0.0, num / den))


def ppi_mean(
    y: Sequence[float],
    f: Sequence[float],
    f_unlabelled: Sequence[float],
    *,
    clusters: Sequence[Hashable] | None = None,
    clusters_unlabelled: Sequence[Hashable] | None = None,
    lam: float | None = None,
    alpha: float = 0.05,
    clip: bool = True,
) -> PPIEstimate | None:
    """PPI++'s mean of the labels ``y`` from the verdicts ``f`` on the same claims and
    ``f_unlabelled`` on the rest, with ``1 − alpha`` intervals clustered by the cluster
    sequences (each claim its own cluster when ``None``: then ``ppi_py``'s numbers). ``lam``
    fixes λ (1: plain PPI; 0: the human-only estimate). ``None`` without labels."""
    if len(y) != len(f):
        raise ValueError("one verdict per label")
    if not y:
        return None
    human = clustered_mean(y, clusters, alpha=alpha, clip=clip)
    assert human is not None
    if not f_unlabelled:
        lam = 0.0
    elif lam is None and clusters is None and clusters_unlabelled is None:
        lam = power_tuning(y, f, f_unlabelled)
    elif lam is None:
        lam = clustered_power_tuning(y, f, f_unlabelled, clusters, clusters_unlabelled)
    rectifier = [a - lam * b for a, b in zip(y, f, strict=True)]
    r_sums, r_counts = _sums(rectifier, clusters)
    r_mean = sum(r_sums) / sum(r_counts)
    r_var = (
        sum((s - r_mean * m) ** 2 for s, m in zip(r_sums, r_counts, strict=True))
        / sum(r_counts) ** 2
    )
    u_sums, u_counts = _sums([lam * b for b in f_unlabelled], clusters_unlabelled)
    u_mean = sum(u_sums) / sum(u_counts) if u_counts else 0.0
    u_var = (
        sum((s - u_mean * m) ** 2 for s, m in zip(u_sums, u_counts, strict=True))
        / sum(u_counts) ** 2
        if u_counts
        else 0.0
    )
    est = u_mean + r_mean
    se = math.sqrt(u_var + r_var)
    n_clusters = len(r_sums) + len(u_sums)
    ppi = MeanEstimate(
        est, se, _interval(est, se, alpha, clip), len(y) + len(f_unlabelled), n_clusters
    )
    effective = len(y) * (human.se / se) ** 2 if se > 0 and human.se > 0 else None
    return PPIEstimate(ppi, human, lam, len(y), len(f_unlabelled), effective)
