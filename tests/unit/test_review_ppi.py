"""PPI++ for citation accuracy: ``ppi_py``'s numbers when every claim stands alone, and an
interval clustered by answer that matches a brute-force cluster bootstrap."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest
from ppi_py import ppi_mean_ci, ppi_mean_pointestimate

from citemon._review.ppi import clustered_mean, power_tuning, ppi_mean


def _claims(
    rng: random.Random, n: int, accuracy: float, agree: float
) -> tuple[list[float], list[float]]:
    """Labels y ~ Bernoulli(accuracy) and a judge that agrees with each w.p. ``agree``."""
    y = [float(rng.random() < accuracy) for _ in range(n)]
    f = [t if rng.random() < agree else 1.0 - t for t in y]
    return y, f


@pytest.mark.parametrize(
    ("n", "big_n", "agree"), [(50, 2000, 0.85), (200, 800, 0.7), (30, 30, 0.95)]
)
@pytest.mark.parametrize("lam", [None, 1.0, 0.0, 0.4])
def test_unclustered_ppi_matches_ppi_py(
    n: int, big_n: int, agree: float, lam: float | None
) -> None:
    rng = random.Random(n * 7 + big_n)
    y, f = _claims(rng, n, 0.6, agree)
    _, f_u = _claims(rng, big_n, 0.6, agree)
    ours = ppi_mean(y, f, f_u, lam=lam, clip=False)
    assert ours is not None
    args = (np.array(y), np.array(f), np.array(f_u))
    point = float(np.asarray(ppi_mean_pointestimate(*args, lam=lam)).squeeze())
    lo, hi = (float(np.asarray(v).squeeze()) for v in ppi_mean_ci(*args, alpha=0.05, lam=lam))
    assert ours.ppi.estimate == pytest.approx(point, abs=1e-6)
    assert ours.ppi.ci[0] == pytest.approx(lo, abs=1e-6)
    assert ours.ppi.ci[1] == pytest.approx(hi, abs=1e-6)
    if lam is None:
        assert 0.0 <= ours.lam <= 1.0
    # lam = 0 is the human-only (classical) estimate and interval
    if lam == 0.0:
        assert ours.ppi.estimate == pytest.approx(statistics.fmean(y), abs=1e-12)
        assert ours.ppi.se == pytest.approx(ours.human.se, abs=1e-12)


def test_power_tuning_is_ppi_py_lambda_and_ppi_beats_labels_alone() -> None:
    rng = random.Random(3)
    y, f = _claims(rng, 100, 0.7, 0.9)
    _, f_u = _claims(rng, 5000, 0.7, 0.9)
    got = ppi_mean(y, f, f_u)
    assert got is not None
    assert got.lam == power_tuning(y, f, f_u) > 0.5
    assert got.ppi.se < got.human.se
    assert got.effective_labels is not None and got.effective_labels > 150


def _clustered(
    rng: random.Random, answers: int, prefix: str
) -> tuple[list[float], list[float], list[str]]:
    """Answers of 1–8 claims whose support and judge agreement share an answer-level cause
    (one retrieval, one fault): claims of an answer are strongly correlated."""
    y: list[float] = []
    f: list[float] = []
    ids: list[str] = []
    for a in range(answers):
        accuracy = rng.choice((0.1, 0.9))
        agree = rng.choice((0.6, 0.95))
        for _ in range(rng.randint(1, 8)):
            t = float(rng.random() < accuracy)
            y.append(t)
            f.append(t if rng.random() < agree else 1.0 - t)
            ids.append(f"{prefix}{a}")
    return y, f, ids


def _by_cluster(values: list[float], ids: list[str]) -> list[list[float]]:
    groups: dict[str, list[float]] = {}
    for v, c in zip(values, ids, strict=True):
        groups.setdefault(c, []).append(v)
    return list(groups.values())


def test_clustered_interval_matches_a_cluster_bootstrap() -> None:
    rng = random.Random(18)
    y, f, ids = _clustered(rng, 150, "l")
    _, f_u, ids_u = _clustered(rng, 600, "u")
    got = ppi_mean(y, f, f_u, clusters=ids, clusters_unlabelled=ids_u, clip=False)
    flat = ppi_mean(y, f, f_u, lam=got.lam if got else None, clip=False)
    assert got is not None and flat is not None
    lam = got.lam
    assert got.ppi.estimate == pytest.approx(flat.ppi.estimate, abs=1e-12)  # same estimator
    # Brute force: resample answers (labelled and unlabelled apart), same lambda.
    labelled = [
        (sum(a - lam * b for a, b in zip(ys, fs, strict=True)), len(ys))
        for ys, fs in zip(_by_cluster(y, ids), _by_cluster(f, ids), strict=True)
    ]
    unlabelled = [(lam * sum(fs), len(fs)) for fs in _by_cluster(f_u, ids_u)]
    boot = random.Random(7)
    estimates = []
    for _ in range(2000):
        lab = boot.choices(labelled, k=len(labelled))
        unl = boot.choices(unlabelled, k=len(unlabelled))
        estimates.append(
            sum(s for s, _ in unl) / sum(m for _, m in unl)
            + sum(s for s, _ in lab) / sum(m for _, m in lab)
        )
    bootstrap_se = statistics.stdev(estimates)
    print(f"\nclustered se {got.ppi.se:.5f}, bootstrap {bootstrap_se:.5f}, flat {flat.ppi.se:.5f}")
    assert got.ppi.se == pytest.approx(bootstrap_se, rel=0.08)
    # Treating claims as independent would understate the uncertainty a lot here.
    assert flat.ppi.se < 0.75 * got.ppi.se


def test_clustered_mean_of_singletons_is_the_textbook_interval() -> None:
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    got = clustered_mean(values, clip=False)
    assert got is not None
    p = 6 / 8
    assert got.estimate == p
    assert got.se == pytest.approx((p * (1 - p) / 8) ** 0.5, abs=1e-15)
    same = clustered_mean(values, [str(i) for i in range(8)], clip=False)
    assert same == got


def test_no_unlabelled_claims_means_labels_alone() -> None:
    got = ppi_mean([1.0, 0.0, 1.0], [1.0, 1.0, 1.0], [])
    assert got is not None and got.lam == 0.0
    assert got.ppi.estimate == pytest.approx(2 / 3) and got.ppi.se == got.human.se
    assert ppi_mean([], [], [1.0]) is None


def test_clustered_tuning_minimises_the_clustered_variance() -> None:
    rng = random.Random(5)
    y, f, ids = _clustered(rng, 40, "l")
    _, f_u, ids_u = _clustered(rng, 300, "u")
    best = ppi_mean(y, f, f_u, clusters=ids, clusters_unlabelled=ids_u)
    assert best is not None and 0.0 < best.lam < 1.0
    for lam in (0.0, best.lam - 0.05, best.lam + 0.05, 1.0):
        other = ppi_mean(y, f, f_u, clusters=ids, clusters_unlabelled=ids_u, lam=lam)
        assert other is not None and best.ppi.se <= other.ppi.se
    assert best.ppi.se <= best.human.se


def test_a_proportion_of_one_gets_an_interval_not_a_point() -> None:
    got = clustered_mean([1.0] * 6, ["a", "a", "b", "c", "c", "d"])
    assert got is not None and got.estimate == 1.0 and got.se == 0.0
    # Wilson's interval for 4 of 4 answers.
    assert got.ci == pytest.approx((4 / (4 + 1.959963984540054**2), 1.0))
