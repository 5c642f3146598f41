"""The learned judge: shipped weights load, obvious cases come out right, training works."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from bench._training import fit_model, grouped_folds
from citemon._core.calibration import balanced_accuracy
from citemon._core.errors import ConfigError
from citemon._core.text import strip_markers
from citemon.judges import Judge, load_judge
from citemon.judges.features import FEATURE_NAMES, extract
from citemon.judges.learned import WEIGHTS_RESOURCE, LearnedJudge, LearnedModel, load_model

PASSAGE = {
    "p-3310": "Audit log retention is 90 days on the Business plan and 365 days on Enterprise.",
}


def test_shipped_weights_are_small_and_documented() -> None:
    file = resources.files("citemon.data").joinpath(WEIGHTS_RESOURCE)
    assert len(file.read_bytes()) < 1_000_000
    model = load_model()
    assert len(model.coef) == len(FEATURE_NAMES)
    assert 1000 <= len(model.idf) <= 20000
    # The weights carry the cross-validated figures they were shipped with.
    figures = model.meta["balanced_accuracy"]["datasets"]
    assert set(figures) == {"wice", "expertqa"}
    assert 0.5 < figures["wice"]["learned_cv"] < 1.0


async def test_obvious_cases() -> None:
    judge = load_judge("learned")
    assert isinstance(judge, Judge) and isinstance(judge, LearnedJudge)
    yes = await judge.entails("Audit logs are retained for 90 days on the Business plan.", PASSAGE)
    no = await judge.entails(
        "Quarterly revenue of the Tokyo subsidiary doubled after the merger with Siemens.",
        PASSAGE,
    )
    assert yes.entailed and not no.entailed
    assert yes.confidence is not None and 0.5 <= yes.confidence <= 1.0
    assert no.confidence is not None and no.confidence > 0.8
    empty = await judge.entails("Anything at all.", {"p-1": "   "})
    assert not empty.entailed


async def test_probability_orders_support() -> None:
    judge = LearnedJudge()
    full = judge.probability("Retention is 365 days on Enterprise.", PASSAGE)
    part = judge.probability("Retention is 365 days on Enterprise and unlimited on Free.", PASSAGE)
    none = judge.probability("The cafeteria serves lunch at noon.", PASSAGE)
    assert full > part > none


def test_features_catch_numbers_and_negation() -> None:
    idx = {n: i for i, n in enumerate(FEATURE_NAMES)}
    same = extract("Retention is 90 days.", PASSAGE, {}, default_idf=5.0)
    other = extract("Retention is 30 days.", PASSAGE, {}, default_idf=5.0)
    negated = extract("Audit log retention is not 90 days.", PASSAGE, {}, default_idf=5.0)
    assert same[idx["numbers_present"]] == 1.0 and other[idx["numbers_present"]] == 0.0
    assert same[idx["negation_mismatch"]] == 0.0 and negated[idx["negation_mismatch"]] == 1.0
    assert same[idx["containment"]] == 1.0


def test_weights_from_other_features_are_refused() -> None:
    data = load_model().to_json()
    data["features"] = data["features"][:-1]
    with pytest.raises(ConfigError, match="retrain"):
        LearnedModel.from_json(data)


def test_fit_model_learns_a_separable_rule() -> None:
    # One informative feature, one noise feature; 30% positives (balancing must still hit both).
    X = [[i / 100, (i * 37 % 11) / 11] for i in range(100)]
    y = [i >= 70 for i in range(100)]
    model = fit_model(X, y, l2=0.1)
    predicted = [model.probability(x) >= 0.5 for x in X]
    ba = balanced_accuracy(y, predicted)
    assert ba is not None and ba > 0.95
    assert abs(model.coef[0]) > 5 * abs(model.coef[1])


def test_grouped_folds_never_split_a_group() -> None:
    groups = [f"a{i // 3}" for i in range(30)]
    folds = grouped_folds(groups, 5)
    assert sorted(i for f in folds for i in f) == list(range(30))
    for fold in folds:
        inside = {groups[i] for i in fold}
        assert all(groups[j] not in inside for other in folds if other is not fold for j in other)


def test_strip_markers() -> None:
    assert strip_markers("It can instill beliefs [3]. ") == "It can instill beliefs."
    assert strip_markers("Both [1, 2][4] agree.") == "Both agree."


def test_the_idf_table_does_not_depend_on_the_hash_seed() -> None:
    # Every word below ties at one document; a cut at 3 terms keeps those seen first, in
    # whatever process the training runs (a set's order would follow PYTHONHASHSEED).
    code = (
        "from bench._training import build_idf\n"
        "docs = ['zeta alpha mike kilo', 'oscar bravo zeta', 'delta echo foxtrot golf']\n"
        "print(build_idf(docs, max_terms=3))\n"
    )
    root = Path(__file__).resolve().parents[2]
    shown = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in range(6)
    }
    assert len(shown) == 1
    assert shown.pop().startswith("({'zeta': 1.2877, 'alpha': 1.6931, 'mike': 1.6931}")
