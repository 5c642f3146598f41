"""Training and honest evaluation of the learned judge, in pure Python (offline: not shipped).

Used by ``scripts/train_judge.py`` (which writes the shipped weights) and by
``bench/judge_quality.py`` (which re-measures them): both go through :func:`cross_validate`, so
the figures in docs/judges.md and the weights come from one code path. The leading underscore keeps
it out of ``make bench``, which runs every public module of ``bench/``.

Honesty rules built in: the IDF table is computed from the training fold only; ExpertQA folds
are grouped by answer (and WiCE folds by cited page), so a claim is never scored by a model that
saw its answer or its page; the threshold is fixed at 0.5 with class-balanced weights instead of
being tuned on the evaluation data.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citemon._core.calibration import balanced_accuracy
from citemon._core.human_labels import HumanLabel, PartialMapping, human_labels, read_label_rows
from citemon._core.judge import Judge
from citemon._core.text import DEFAULT_SYNTAX, CitationSyntax, content_words, strip_markers, tokens
from citemon.judges.features import extract
from citemon.judges.learned import LearnedModel, sigmoid

__all__ = [
    "Example",
    "FoldResult",
    "build_idf",
    "cross_validate",
    "fit_model",
    "grouped_folds",
    "judge_probabilities",
    "load_expertqa",
    "load_wice",
    "predict",
    "quality_report",
    "train",
]


@dataclass(frozen=True)
class Example:
    """One human-labelled (claim, cited passages) pair."""

    claim: str
    passages: dict[str, str]
    entailed: bool
    group: str  # examples sharing a group never sit on both sides of a split
    dataset: str
    label: str  # the human label as written in the data


def load_wice(path: Path, *, partial: PartialMapping = "not_entailed") -> list[Example]:
    """WiCE pairs (:mod:`citemon._core.human_labels` reads them), grouped by the cited page so the
    same page never trains and tests."""
    return [
        Example(lab.claim, lab.passages, lab.entailed, _page_group(lab), "wice", lab.label)
        for lab in _labels(path, partial, "wice")
    ]


def load_expertqa(
    path: Path, *, partial: PartialMapping = "not_entailed", syntax: CitationSyntax = DEFAULT_SYNTAX
) -> list[Example]:
    """ExpertQA annotator claims (markers stripped with ``syntax``) with the texts of their cited
    passages (:mod:`citemon._core.human_labels` reads them: ``Missing``, ``N/A``, claims without
    citations and claims citing a passage with no text are left out). Grouped by answer."""
    return [
        Example(
            strip_markers(lab.claim, syntax),
            lab.passages,
            lab.entailed,
            lab.record.id if lab.record is not None and lab.record.id else str(lab.line),
            "expertqa",
            lab.label,
        )
        for lab in _labels(path, partial, "expertqa")
    ]


def _labels(path: Path, partial: PartialMapping, dataset: str) -> list[HumanLabel]:
    return [
        lab
        for lab in human_labels(read_label_rows(path), partial=partial)
        if isinstance(lab, HumanLabel) and lab.dataset == dataset
    ]


def _page_group(lab: HumanLabel) -> str:
    return "wice:" + hashlib.sha1(lab.passages["1"].encode()).hexdigest()[:12]


def build_idf(docs: Iterable[str], *, max_terms: int) -> tuple[dict[str, float], float]:
    """Smoothed IDF over stemmed content words; keeps the ``max_terms`` most frequent terms
    (the rest get the returned default, the IDF of a term seen once) so the shipped table stays
    small."""
    df: Counter[str] = Counter()
    n = 0
    for doc in docs:
        n += 1
        # Each word once, in the order it first appears, not in a set's order: most_common
        # breaks ties at the cut by first sight, and a set's order changes with PYTHONHASHSEED.
        df.update(dict.fromkeys(content_words(tokens(doc))).keys())
    kept = df.most_common(max_terms)
    idf = {term: round(math.log((n + 1) / (count + 1)) + 1.0, 4) for term, count in kept}
    default = round(math.log((n + 1) / 2) + 1.0, 4)
    return idf, default


def _docs(examples: Iterable[Example]) -> list[str]:
    seen: dict[str, None] = {}
    for ex in examples:
        for text in ex.passages.values():
            seen.setdefault(text, None)
    return list(seen)


# ---------------------------------------------------------------------------------------------
# Logistic regression (Newton/IRLS on standardised features, class-balanced, L2)


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the systems here are ~20×20)."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[piv] = m[piv], m[col]
        if abs(m[col][col]) < 1e-12:
            continue
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            if f:
                for c in range(col, n + 1):
                    m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        if abs(m[r][r]) < 1e-12:
            continue
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


def fit_model(
    X: Sequence[Sequence[float]],
    y: Sequence[bool],
    *,
    l2: float = 1.0,
    iterations: int = 25,
    strata: Sequence[str] | None = None,
) -> LearnedModel:
    """Class-balanced L2 logistic regression fitted by Newton's method.

    Balanced weights make 0.5 the threshold that targets balanced accuracy, whatever the share
    of entailed pairs in the training data. With ``strata`` (e.g. the dataset of each row) the
    balance holds within every stratum, each stratum weighing the same: pooling a 33%-entailed
    set with a 72%-entailed one must not teach the model that base rates are evidence.
    """
    n, d = len(X), len(X[0])
    mean = [sum(row[j] for row in X) / n for j in range(d)]
    scale = []
    for j in range(d):
        var = sum((row[j] - mean[j]) ** 2 for row in X) / n
        scale.append(math.sqrt(var) or 1.0)
    Z = [[1.0] + [(row[j] - mean[j]) / scale[j] for j in range(d)] for row in X]
    cells = Counter(zip(strata or [""] * n, y, strict=True))
    weight = [n / (len(cells) * cells[cell]) for cell in zip(strata or [""] * n, y, strict=True)]
    beta = [0.0] * (d + 1)
    for _ in range(iterations):
        grad = [0.0] * (d + 1)
        hess = [[0.0] * (d + 1) for _ in range(d + 1)]
        for z, t, wt in zip(Z, y, weight, strict=True):
            p = sigmoid(sum(b * v for b, v in zip(beta, z, strict=True)))
            r = wt * (p - (1.0 if t else 0.0))
            h = wt * p * (1 - p)
            for a in range(d + 1):
                grad[a] += r * z[a]
                ha = h * z[a]
                row = hess[a]
                for b in range(a, d + 1):
                    row[b] += ha * z[b]
        for a in range(d + 1):
            for b in range(a):
                hess[a][b] = hess[b][a]
        for a in range(1, d + 1):  # no penalty on the intercept
            grad[a] += l2 * beta[a]
            hess[a][a] += l2
        step = _solve(hess, grad)
        beta = [b - s for b, s in zip(beta, step, strict=True)]
        if max(abs(s) for s in step) < 1e-7:
            break
    return LearnedModel(mean=mean, scale=scale, coef=beta[1:], intercept=beta[0])


# ---------------------------------------------------------------------------------------------
# Splits and evaluation


def grouped_folds(groups: Sequence[str], k: int, *, seed: int = 0) -> list[list[int]]:
    """Indices split into ``k`` folds with every group wholly inside one fold."""
    distinct = sorted(set(groups))
    random.Random(seed).shuffle(distinct)
    fold_of = {g: i % k for i, g in enumerate(distinct)}
    folds: list[list[int]] = [[] for _ in range(k)]
    for i, g in enumerate(groups):
        folds[fold_of[g]].append(i)
    return folds


def featurize(
    examples: Sequence[Example], idf: dict[str, float], default_idf: float
) -> list[list[float]]:
    return [extract(ex.claim, ex.passages, idf, default_idf=default_idf) for ex in examples]


def train(
    examples: Sequence[Example], *, max_idf_terms: int = 20000, l2: float = 1.0
) -> LearnedModel:
    """Fit on ``examples``: IDF from their passages, then the logistic model."""
    idf, default_idf = build_idf(_docs(examples), max_terms=max_idf_terms)
    features = featurize(examples, idf, default_idf)
    strata = [ex.dataset for ex in examples]
    model = fit_model(features, [ex.entailed for ex in examples], l2=l2, strata=strata)
    model.idf, model.default_idf = idf, default_idf
    return model


def predict(model: LearnedModel, examples: Sequence[Example]) -> list[float]:
    return [model.probability(x) for x in featurize(examples, model.idf, model.default_idf)]


@dataclass
class FoldResult:
    """Out-of-fold probabilities for every example (each scored by a model that never saw it)."""

    examples: list[Example]
    probability: list[float]

    def balanced_accuracy(self, threshold: float = 0.5) -> float | None:
        return balanced_accuracy(
            [ex.entailed for ex in self.examples], [p >= threshold for p in self.probability]
        )


def cross_validate(
    examples: Sequence[Example],
    *,
    k: int = 5,
    seed: int = 0,
    trainer: Callable[[Sequence[Example]], LearnedModel] = train,
    progress: Callable[[int], None] | None = None,
) -> FoldResult:
    """Grouped ``k``-fold cross-validation: out-of-fold probabilities for all examples."""
    folds = grouped_folds([ex.group for ex in examples], k, seed=seed)
    prob = [0.0] * len(examples)
    for f, test_idx in enumerate(folds):
        held = set(test_idx)
        model = trainer([ex for i, ex in enumerate(examples) if i not in held])
        for i, p in zip(test_idx, predict(model, [examples[i] for i in test_idx]), strict=True):
            prob[i] = p
        if progress is not None:
            progress(f)
    return FoldResult(list(examples), prob)


def judge_probabilities(judge: Judge, examples: Sequence[Example]) -> list[float]:
    """Run any judge over ``examples`` through its ``entails`` (1.0 entailed, 0.0 not), so an
    untrained judge is measured with the same harness as the learned one."""

    async def run() -> list[float]:
        out = []
        for ex in examples:
            verdict = await judge.entails(ex.claim, ex.passages)
            out.append(1.0 if verdict.entailed else 0.0)
        return out

    return asyncio.run(run())


def quality_report(
    data_dir: Path,
    *,
    partial: PartialMapping = "not_entailed",
    k: int = 5,
    seed: int = 0,
    baseline: Judge | None = None,
) -> dict[str, Any]:
    """The learned judge's figures on the development data, every one on data it was not
    trained on: grouped k-fold CV within each dataset, CV on the pooled data reported per
    dataset, and train-on-one/test-on-the-other. ``baseline`` (e.g. the lexical judge, which
    has nothing to train) is scored on every pair with the same metric."""
    datasets = {
        "wice": load_wice(data_dir / "wice" / "dev.jsonl", partial=partial),
        "expertqa": load_expertqa(data_dir / "expertqa" / "val.jsonl", partial=partial),
    }
    figures: dict[str, Any] = {"k": k, "seed": seed, "partial": partial, "datasets": {}}
    pooled = [ex for exs in datasets.values() for ex in exs]
    pooled_cv = cross_validate(pooled, k=k, seed=seed)
    start = 0
    for name, exs in datasets.items():
        truth = [ex.entailed for ex in exs]
        within = cross_validate(exs, k=k, seed=seed)
        pooled_here = pooled_cv.probability[start : start + len(exs)]
        start += len(exs)
        row: dict[str, Any] = {
            "pairs": len(exs),
            "entailed": sum(truth),
            "learned_cv": _round(within.balanced_accuracy()),
            "learned_pooled_cv": _round(balanced_accuracy(truth, [p >= 0.5 for p in pooled_here])),
        }
        others = [ex for other, oexs in datasets.items() if other != name for ex in oexs]
        cross = predict(train(others), exs)
        row["learned_trained_on_other"] = _round(
            balanced_accuracy(truth, [p >= 0.5 for p in cross])
        )
        if baseline is not None:
            base = judge_probabilities(baseline, exs)
            row["baseline"] = _round(balanced_accuracy(truth, [p >= 0.5 for p in base]))
        figures["datasets"][name] = row
    return figures


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
