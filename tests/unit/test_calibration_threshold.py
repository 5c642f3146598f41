"""ROC AUC and the balanced-accuracy threshold, on hand-built cases with known answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from citemon._checks.calibration import JudgedPair, evaluate
from citemon._checks.labelled_pairs import LabelledPair
from citemon._checks.threshold import best_threshold, roc_auc, threshold_bootstrap
from citemon._core.calibration import Calibration, Confusion
from citemon._core.records import Verdict

# Entailed pairs score 0.9, 0.8, 0.4; the others 0.7, 0.3, 0.2, 0.1.
POS = [0.9, 0.8, 0.4]
NEG = [0.7, 0.3, 0.2, 0.1]
SCORED = [(True, s) for s in POS] + [(False, s) for s in NEG]


def test_roc_auc_counts_pairs_ranked_right() -> None:
    # 0.9 and 0.8 beat all four negatives, 0.4 beats three of them: 11 of 12 pairs.
    assert roc_auc(SCORED) == pytest.approx(11 / 12)


def test_roc_auc_ties_count_one_half() -> None:
    assert roc_auc([(True, 0.5), (False, 0.5)]) == 0.5
    # 0.6 beats 0.5 (1) and ties 0.6 (1/2); 0.5 ties 0.5 (1/2) and loses to 0.6 (0): 2 of 4.
    assert roc_auc([(True, 0.6), (True, 0.5), (False, 0.5), (False, 0.6)]) == 0.5
    assert roc_auc([(True, 1.0), (False, 0.0)]) == 1.0
    assert roc_auc([(True, 0.0), (False, 1.0)]) == 0.0


def test_roc_auc_needs_both_classes() -> None:
    assert roc_auc([(True, 0.3), (True, 0.9)]) is None
    assert best_threshold([(False, 0.3)]) is None
    assert threshold_bootstrap([(False, 0.3)]) is None


def test_best_threshold_is_the_midpoint_below_the_best_cut() -> None:
    # Cuts (entailed iff score >= s): 0.9 → BA (1/3 + 1)/2 = 0.667; 0.8 → (2/3 + 1)/2 = 0.833;
    # 0.7 → (2/3 + 3/4)/2 = 0.708; 0.4 → (1 + 3/4)/2 = 0.875 (best); 0.3 → 0.75; …
    choice = best_threshold(SCORED)
    assert choice is not None
    assert choice.threshold == pytest.approx(0.35)  # between the best cut 0.4 and 0.3
    assert choice.balanced_accuracy == pytest.approx(0.875)
    assert (choice.sensitivity, choice.specificity) == (1.0, 0.75)


def test_best_threshold_tie_goes_to_the_higher_cut() -> None:
    # Cut 0.8: (1/2 + 1)/2 = 0.75; cut 0.6: (1 + 1/2)/2 = 0.75: a tie, the higher cut wins.
    scored = [(True, 0.8), (True, 0.6), (False, 0.7), (False, 0.2)]
    choice = best_threshold(scored)
    assert choice is not None
    assert choice.threshold == pytest.approx(0.75) and choice.balanced_accuracy == 0.75


def test_perfectly_separated_scores() -> None:
    choice = best_threshold([(True, 0.9), (True, 0.6), (False, 0.4), (False, 0.1)])
    assert choice is not None
    assert choice.threshold == pytest.approx(0.5) and choice.balanced_accuracy == 1.0


def test_bootstrap_is_seeded_and_brackets_the_point_estimates() -> None:
    scored = [(True, 0.5 + 0.01 * i) for i in range(40)] + [
        (False, 0.3 + 0.01 * i) for i in range(40)
    ]
    first = threshold_bootstrap(scored, draws=300, seed=7)
    assert first == threshold_bootstrap(scored, draws=300, seed=7)
    assert first != threshold_bootstrap(scored, draws=300, seed=8)
    assert first is not None
    (auc_lo, auc_hi), (t_lo, t_hi) = first
    auc, choice = roc_auc(scored), best_threshold(scored)
    assert choice is not None and auc is not None
    assert auc_lo <= auc <= auc_hi and t_lo <= choice.threshold <= t_hi
    assert t_lo < t_hi


def _judged(entailed: bool, p: float, *, means: str) -> JudgedPair:
    pair = LabelledPair("c", {"1": "p"}, entailed, "supported" if entailed else "x", "line 1")
    if means == "verdict":  # a judge that reports the probability of the verdict it gave
        verdict = Verdict(entailed=p >= 0.5, confidence=p if p >= 0.5 else 1 - p)
    else:
        verdict = Verdict(entailed=p >= 0.5, confidence=p)
    return JudgedPair(pair, verdict)


@pytest.mark.parametrize("means", ["entailed", "verdict"])
def test_report_and_calibration_file_carry_the_threshold_and_its_counts(
    means: str, tmp_path: Path
) -> None:
    judged = [_judged(True, s, means=means) for s in POS] + [
        _judged(False, s, means=means) for s in NEG
    ]
    report = evaluate(judged, judge="classifier", data="d", partial="p", confidence_means=means)
    # The judge's own rule (>= 0.5): 0.9, 0.8, 0.7 entailed.
    assert report.confusion == Confusion(tp=2, fn=1, tn=3, fp=1)
    assert report.roc_auc == pytest.approx(11 / 12)
    assert report.threshold == pytest.approx(0.35)
    assert report.threshold_confusion == Confusion(tp=3, fn=0, tn=3, fp=1)
    assert report.threshold_balanced_accuracy == pytest.approx(0.875)
    assert report.scored_pairs == 7
    assert report.threshold_ci95 is not None and report.roc_auc_ci95 is not None
    calib = report.calibration()
    assert (calib.tp, calib.fn, calib.tn, calib.fp) == (3, 0, 3, 1)
    assert calib.threshold == pytest.approx(0.35) and calib.roc_auc == pytest.approx(11 / 12)
    own = report.calibration(with_threshold=False)
    assert (own.tp, own.fn, own.tn, own.fp) == (2, 1, 3, 1) and own.threshold is None
    path = tmp_path / "calib.json"
    calib.save(path)
    loaded = Calibration.load(path)
    assert loaded.threshold_for("classifier") == pytest.approx(0.35)
    assert loaded.threshold_for("lexical") is None


def test_a_judge_without_a_declared_confidence_gets_no_threshold() -> None:
    judged = [_judged(True, s, means="entailed") for s in POS] + [
        _judged(False, s, means="entailed") for s in NEG
    ]
    report = evaluate(judged, judge="lexical", data="d", partial="p")
    assert report.roc_auc is None and report.threshold is None
    assert report.calibration().threshold is None
    assert report.calibration().tp == 2  # the judge's own verdicts


def test_an_old_calibration_file_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text('{"format": 1, "judge": "lexical", "tp": 5, "fn": 1, "tn": 4, "fp": 2}')
    calib = Calibration.load(path)
    assert calib.threshold is None and calib.threshold_for("lexical") is None
