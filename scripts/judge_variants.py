"""Confirm or reject learned-judge variants on CV seeds that were not used to choose them.

    .venv/bin/python scripts/judge_variants.py [--data DIR] [--seeds 1 2 3]

(``--data`` defaults to ``$CITEMON_LABELLED_DATA``: see ``tests/labelled_data.py``.)

The variants were noticed while looking at seed-0 results (stronger L2, a 7-feature subset), so
seed 0 cannot confirm them; this script scores them on fresh grouped 5-fold splits, with the
IDF table built from each training fold, exactly as ``bench.judge_quality`` does. Gradient-boosted
trees are added when scikit-learn happens to be installed (it is not a citemon dependency).
Prints balanced accuracy per seed and the mean, per dataset and variant. Features are computed
once per fold and shared by every variant (featurising is the slow part), which is why this does
not call ``training.cross_validate`` once per variant.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "monitor"), str(REPO)]  # citemon from monitor/, without installing

from bench._training import (  # noqa: E402
    _docs,
    build_idf,
    featurize,
    fit_model,
    grouped_folds,
    load_expertqa,
    load_wice,
)
from citemon._core.calibration import balanced_accuracy  # noqa: E402
from citemon.judges.features import FEATURE_NAMES  # noqa: E402 (path set above)
from tests.labelled_data import labelled_data_dir  # noqa: E402

Rows = list[list[float]]
Variant = Callable[[Rows, list[bool], Rows], list[float]]

SUBSET = (
    "best_window",
    "top3_union",
    "bigram_containment",
    "passage_length",
    "numbers_present",
    "longest_run",
    "claim_length",
)


def logistic(l2: float, names: Sequence[str] = FEATURE_NAMES) -> Variant:
    cols = [FEATURE_NAMES.index(n) for n in names]

    def run(x_train: Rows, y_train: list[bool], x_test: Rows) -> list[float]:
        model = fit_model([[r[c] for c in cols] for r in x_train], y_train, l2=l2)
        return [model.probability([r[c] for c in cols]) for r in x_test]

    return run


def boosted_trees() -> Variant | None:
    try:
        from sklearn.ensemble import GradientBoostingClassifier  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None

    def run(x_train: Rows, y_train: list[bool], x_test: Rows) -> list[float]:
        pos = sum(y_train)
        weight = [len(y_train) / (2 * (pos if t else len(y_train) - pos)) for t in y_train]
        model = GradientBoostingClassifier(
            max_depth=2, n_estimators=100, learning_rate=0.05, subsample=0.8, random_state=0
        ).fit(x_train, y_train, sample_weight=weight)
        return [float(p) for p in model.predict_proba(x_test)[:, 1]]

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=labelled_data_dir())
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    variants: dict[str, Variant] = {
        "logistic, L2 1 (shipped)": logistic(1.0),
        "logistic, L2 10": logistic(10.0),
        "logistic, 7 features": logistic(1.0, SUBSET),
        "logistic, 7 features, L2 10": logistic(10.0, SUBSET),
    }
    if (trees := boosted_trees()) is not None:
        variants["boosted trees, depth 2 × 100"] = trees
    else:
        print("scikit-learn not installed: boosted trees left out", file=sys.stderr)
    datasets = {
        "wice": load_wice(args.data / "wice" / "dev.jsonl"),
        "expertqa": load_expertqa(args.data / "expertqa" / "val.jsonl"),
    }
    print(f"balanced accuracy, grouped 5-fold CV, seeds {args.seeds}")
    for name, examples in datasets.items():
        truth = [ex.entailed for ex in examples]
        scores: dict[str, list[float]] = {v: [] for v in variants}
        for seed in args.seeds:
            prob = {v: [0.0] * len(examples) for v in variants}
            for test in grouped_folds([ex.group for ex in examples], 5, seed=seed):
                held = set(test)
                train = [examples[i] for i in range(len(examples)) if i not in held]
                idf, default = build_idf(_docs(train), max_terms=20000)
                x_train = featurize(train, idf, default)
                x_test = featurize([examples[i] for i in test], idf, default)
                y_train = [ex.entailed for ex in train]
                for v, fit in variants.items():
                    for i, p in zip(test, fit(x_train, y_train, x_test), strict=True):
                        prob[v][i] = p
            for v in variants:
                ba = balanced_accuracy(truth, [p >= 0.5 for p in prob[v]])
                scores[v].append(float("nan") if ba is None else ba)  # nan: one class only
        for v, runs in scores.items():
            per_seed = " ".join(f"{s:.3f}" for s in runs)
            print(f"{name:>9}  {v:<30} {per_seed}  mean {statistics.fmean(runs):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
