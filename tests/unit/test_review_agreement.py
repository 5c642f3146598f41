"""Cohen's κ of two reviewers, checked against scikit-learn's ``cohen_kappa_score``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sklearn.metrics import cohen_kappa_score

from citemon._core.errors import InputError
from citemon._core.stats import cohen_kappa
from citemon._review.agreement import agreement
from citemon._review.model import LABELS, Label, LabelName, append_label, read_labels
from citemon.cli import main


def _labels(reviewer: str, names: list[LabelName], start: int = 0) -> list[Label]:
    return [
        Label(trace_id=f"t{(start + i) // 3}", claim=(start + i) % 3, text=f"claim {start + i}",
              label=name, reviewer=reviewer)
        for i, name in enumerate(names)
    ]  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_kappa_overall_and_per_label_match_scikit_learn(seed: int) -> None:
    rng = random.Random(seed)
    a: list[LabelName] = [rng.choice(LABELS) for _ in range(60)]
    # the second reviewer mostly agrees, so kappa is far from 0
    b: list[LabelName] = [x if rng.random() < 0.7 else rng.choice(LABELS) for x in a]
    result = agreement(_labels("ann", a) + _labels("bob", b))
    assert result.claims == 60
    assert result.kappa == pytest.approx(cohen_kappa_score(a, b, labels=list(LABELS)), abs=1e-9)
    for name in LABELS:
        want = cohen_kappa_score([x == name for x in a], [y == name for y in b])
        assert result.kappa_per_label[name] == pytest.approx(want, abs=1e-9)
    assert sum(sum(row.values()) for row in result.confusion.values()) == 60
    assert result.observed == pytest.approx(
        sum(x == y for x, y in zip(a, b, strict=True)) / 60, abs=1e-12
    )


def test_a_worked_example_and_the_confusion_table() -> None:
    a: list[LabelName] = ["entailed"] * 6 + ["not_entailed"] * 3 + ["partial"]
    b: list[LabelName] = ["entailed"] * 5 + ["partial"] + ["not_entailed"] * 3 + ["not_a_claim"]
    result = agreement(_labels("ann", a) + _labels("bob", b))
    # p_o = 8/10; p_e = (6*5 + 1*1 + 3*3 + 0*1) / 100 = 0.40; kappa = 0.4 / 0.6
    assert result.observed == pytest.approx(0.8)
    assert result.kappa == pytest.approx(2 / 3, abs=1e-12)
    assert result.confusion["entailed"] == {
        "entailed": 5, "partial": 1, "not_entailed": 0, "not_a_claim": 0,
    }  # fmt: skip
    assert result.confusion["partial"]["not_a_claim"] == 1
    assert result.kappa_per_label["not_a_claim"] == pytest.approx(0.0)


def test_only_claims_both_labelled_count_and_the_latest_label_wins(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    for label in _labels("ann", ["entailed", "partial", "entailed"]) + _labels(
        "bob", ["entailed", "not_entailed"]
    ):
        append_label(path, label)
    append_label(path, _labels("bob", ["partial"], start=1)[0])  # bob changes his mind
    result = agreement(read_labels(path))
    assert (result.claims, result.only) == (2, (1, 0))
    assert result.observed == 1.0
    assert result.kappa == 1.0


def test_undefined_kappa_and_the_wrong_number_of_reviewers() -> None:
    assert cohen_kappa({("entailed", "entailed"): 4}) is None  # p_e = 1
    assert cohen_kappa({}) is None
    with pytest.raises(InputError, match="exactly two reviewers, found 3"):
        agreement(_labels("ann", ["entailed"]) + _labels("bob", ["entailed"])
                  + _labels("cy", ["entailed"]))  # fmt: skip
    result = agreement(
        _labels("ann", ["entailed", "partial"]) + _labels("bob", ["entailed", "entailed"])
        + _labels("cy", ["entailed", "partial"]), ["ann", "cy"],
    )  # fmt: skip
    assert (result.reviewers, result.kappa) == (("ann", "cy"), 1.0)
    with pytest.raises(InputError, match="no labels from dan"):
        agreement(_labels("ann", ["entailed"]), ["ann", "dan"])


def test_the_command_prints_the_table_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "labels.jsonl"
    a: list[LabelName] = ["entailed"] * 6 + ["not_entailed"] * 3 + ["partial"]
    b: list[LabelName] = ["entailed"] * 5 + ["partial"] + ["not_entailed"] * 3 + ["not_a_claim"]
    for label in _labels("ann", a) + _labels("bob", b):
        append_label(path, label)
    assert main(["review", "agreement", str(path)]) == 0
    table = capsys.readouterr().out
    assert "reviewers ann and bob: 10 claims labelled by both" in table
    assert "observed agreement 0.800   Cohen's kappa 0.667" in table
    assert main(["review", "agreement", str(path), "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["kappa"] == pytest.approx(2 / 3)
    assert payload["confusion"]["not_entailed"]["not_entailed"] == 3
