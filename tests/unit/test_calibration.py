"""Calibration maths on hand-worked cases, the calibration file, and `citemon calibrate` on the
shared labelled data."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from citemon._checks.agreement import balanced_accuracy_ci, kappa, kappa_ci
from citemon._checks.calibration import JudgedPair, evaluate
from citemon._checks.labelled_pairs import pairs_from_rows
from citemon._core.calibration import Calibration, Confusion, balanced_accuracy, corrected_accuracy
from citemon._core.errors import ConfigError
from citemon._core.records import Verdict
from citemon.cli import main

HAND = Confusion(tp=8, fn=2, tn=6, fp=4)


def test_hand_case_metrics() -> None:
    # sens 8/10, spec 6/10; po = 14/20; pe = (12·10 + 8·10)/400 = 0.5; κ = (0.7-0.5)/0.5.
    assert HAND.n == 20
    assert HAND.sensitivity == pytest.approx(0.8)
    assert HAND.specificity == pytest.approx(0.6)
    assert HAND.balanced_accuracy == pytest.approx(0.7)
    assert kappa(HAND) == pytest.approx(0.4)
    lo, hi = balanced_accuracy_ci(HAND)  # type: ignore[misc]
    assert lo < 0.7 < hi and lo > 0.4 and hi < 0.95
    klo, khi = kappa_ci(HAND)  # type: ignore[misc]
    assert klo < 0.4 < khi and klo > -0.3 and khi < 0.9
    # Fixed seed: the same interval every time, whatever the global random state; the
    # bootstrap really draws (another seed moves it), so the equality is not trivially true.
    first = balanced_accuracy_ci(HAND)
    random.seed(12345)
    random.random()
    assert balanced_accuracy_ci(HAND) == first
    assert balanced_accuracy_ci(HAND, seed=1) != first


def test_degenerate_cases() -> None:
    assert kappa(Confusion()) is None
    only_pos = Confusion(tp=5, fn=1)
    assert only_pos.specificity is None and only_pos.balanced_accuracy is None
    assert balanced_accuracy_ci(only_pos) is None
    perfect = Confusion(tp=50, tn=50)
    assert kappa(perfect) == pytest.approx(1.0)
    # Agreement no better than chance: κ = 0.
    assert kappa(Confusion(tp=25, fn=25, tn=25, fp=25)) == pytest.approx(0.0)


def _calib(c: Confusion) -> Calibration:
    return Calibration.from_confusion(c, judge="lexical", data="hand", partial="not_entailed")


def test_rogan_gladen_hand_case() -> None:
    # p_obs 0.6, sens 0.8, spec 0.6 → (0.6 + 0.6 - 1)/(0.8 + 0.6 - 1) = 0.5.
    point, (lo, hi) = corrected_accuracy(60, 100, _calib(HAND))  # type: ignore[misc]
    assert point == pytest.approx(0.5)
    assert lo < 0.5 < hi
    # A calibration from 20 pairs is the main uncertainty: the interval is wide...
    assert hi - lo > 0.3
    # ...and a 50× larger calibration with the same rates narrows it.
    big = Confusion(tp=400, fn=100, tn=300, fp=200)
    point_b, (lo_b, hi_b) = corrected_accuracy(6000, 10000, _calib(big))  # type: ignore[misc]
    assert point_b == pytest.approx(0.5)
    assert hi_b - lo_b < (hi - lo) / 3
    # Clipped to [0, 1]: an observed rate below 1 - spec means "nothing is correct".
    clipped = corrected_accuracy(30, 100, _calib(HAND))
    assert clipped is not None and clipped[0] == 0.0


def test_rogan_gladen_refuses_uninformative_judge() -> None:
    coin = Confusion(tp=50, fn=50, tn=52, fp=48)  # sens + spec - 1 = 0.02
    assert corrected_accuracy(60, 100, _calib(coin)) is None
    assert corrected_accuracy(0, 0, _calib(HAND)) is None


def test_calibration_file_round_trip(tmp_path: Path) -> None:
    calib = _calib(HAND)
    path = tmp_path / "calib.json"
    calib.save(path)
    loaded = Calibration.load(path)
    assert loaded == calib
    assert loaded.confusion == HAND
    assert loaded.sensitivity == pytest.approx(0.8) and loaded.judge == "lexical"
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ConfigError):
        Calibration.load(tmp_path / "bad.json")


def test_pairs_and_evaluate_on_hand_rows() -> None:
    rows = [
        {"claim": "Paris is in France.", "passage": "Paris is the capital of France.",
         "label": "supported"},
        {"claim": "Paris has 9 million people.", "passage": "Paris is big.",
         "label": "partially_supported"},
        {"claim": "x", "passage": "y", "label": "weird"},
        {"answer": "The sky is blue [1]. Grass is red [2].",
         "passages": [{"id": "1", "text": "The sky is blue on clear days."},
                      {"id": "2", "text": ""}],
         "labels": [{"claim": "The sky is blue [1].", "cited_ids": ["1"], "support": "Complete"},
                    {"claim": "Grass is red [2].", "cited_ids": ["2"], "support": "Incomplete"},
                    {"claim": "Other.", "cited_ids": [], "support": "Missing"}]},
    ]  # fmt: skip
    pairs, skipped = pairs_from_rows(rows)
    assert [(p.claim, p.entailed) for p in pairs] == [
        ("Paris is in France.", True),
        ("Paris has 9 million people.", False),
        ("The sky is blue.", True),
    ]
    assert skipped == {
        "unknown label 'weird'": 1,
        "cited passage has no text": 1,
        "label Missing": 1,
    }
    excluded, skipped2 = pairs_from_rows(rows, partial="exclude")
    assert len(excluded) == 2 and skipped2["label partially_supported (--partial exclude)"] == 1

    judged = [
        JudgedPair(pairs[0], Verdict(entailed=True, confidence=0.9)),
        JudgedPair(pairs[1], Verdict(entailed=True, confidence=0.8)),  # wrong, confident
        JudgedPair(pairs[2], None, "JudgeTimeout: slow"),
    ]
    report = evaluate(judged, judge="test", data="hand", partial="not_entailed", skipped=skipped)
    assert report.pairs == 2
    assert report.confusion == Confusion(tp=1, fp=1)
    assert report.skipped["judge failed"] == 1
    assert [d.claim for d in report.disagreements] == ["Paris has 9 million people."]
    assert report.disagreements[0].passage_excerpt == "[1] Paris is big."


def _calibrate(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    status = main(["calibrate", "--format", "json", *argv])
    out = capsys.readouterr().out
    assert status == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


def _sane(report: dict) -> None:  # type: ignore[type-arg]
    for name in ("sensitivity", "specificity", "balanced_accuracy"):
        assert 0.0 <= report[name] <= 1.0
        lo, hi = report[f"{name}_ci95"]
        assert 0.0 <= lo <= report[name] <= hi <= 1.0
    lo, hi = report["kappa_ci95"]
    assert -1.0 <= lo <= report["kappa"] <= hi <= 1.0
    c = report["confusion"]
    assert c["tp"] + c["fn"] + c["tn"] + c["fp"] == report["pairs"]
    assert report["sensitivity"] == pytest.approx(c["tp"] / (c["tp"] + c["fn"]))


@pytest.mark.shared_data
def test_calibrate_wice(
    shared_data: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "calib.json"
    report = _calibrate(
        capsys, "--labels", str(shared_data / "wice" / "dev.jsonl"), "--judge", "learned",
        "--limit", "200", "--output", str(out),
    )  # fmt: skip
    assert report["pairs"] == 200
    _sane(report)
    # The learned judge measured on (part of) its development data: clearly better than chance.
    assert report["balanced_accuracy"] > 0.6
    assert report["kappa"] > 0.15
    assert len(report["disagreements"]) == 10
    worst = report["disagreements"][0]
    assert worst["human_entailed"] != worst["judge_entailed"]
    assert worst["confidence"] >= report["disagreements"][-1]["confidence"]
    calib = Calibration.load(out)
    assert calib.judge == "learned" and calib.confusion.n == 200


@pytest.mark.shared_data
def test_calibrate_expertqa(shared_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    labels = str(shared_data / "expertqa" / "val.jsonl")
    learned = _calibrate(capsys, "--labels", labels, "--judge", "learned", "--limit", "300")
    lexical = _calibrate(capsys, "--labels", labels, "--judge", "lexical", "--limit", "300")
    for report in (learned, lexical):
        assert report["pairs"] == 300
        _sane(report)
        # Missing/N-A labels and labels citing passages without text are skipped, with reasons.
        assert report["skipped"]["label Missing"] > 0
        assert report["skipped"]["cited passage has no text"] > 0
    # ExpertQA is hard for any lexical judge; the measured floor is modest but above chance.
    assert learned["balanced_accuracy"] > 0.55
    assert learned["kappa"] > 0.05


def test_bad_json_in_labels_names_its_file_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"claim": "a", "passage": "a", "label": "supported"}\n\n{oops\n')
    assert main(["calibrate", "--labels", str(labels)]) == 2
    assert "line 3:" in capsys.readouterr().err


def test_balanced_accuracy_is_one_function_and_undefined_without_both_classes() -> None:
    # 1 of 1 entailed pair accepted, 1 of 2 others rejected: (1 + 0.5) / 2.
    assert balanced_accuracy([True, False, False], [True, False, True]) == 0.75
    # One class missing: its rate is undefined, so is the mean (not half the other rate).
    assert balanced_accuracy([True, True], [True, True]) is None
    assert balanced_accuracy([False, False], [False, True]) is None
    assert Confusion.from_pairs([(True, True), (True, True)]).balanced_accuracy is None


def test_calibrate_reads_markers_with_marker_pattern(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An answer citing with ``{1}``: its annotator claim, written without the marker, matches
    the extracted claim only when ``--marker-pattern`` says what a marker is."""
    labels = tmp_path / "labels.jsonl"
    row = {
        "answer": "The sky is blue {1}. Grass is red {2}.",
        "passages": [{"id": "1", "text": "The sky is blue on clear days."},
                     {"id": "2", "text": "Grass is green."}],
        "labels": [{"claim": "The sky is blue.", "cited_ids": ["1"], "support": "Complete"},
                   {"claim": "Grass is red.", "cited_ids": ["2"], "support": "Incomplete"}],
    }  # fmt: skip
    labels.write_text(json.dumps(row) + "\n", encoding="utf-8")
    argv = ["calibrate", "--format", "json", "--labels", str(labels), "--judge", "lexical"]
    assert main(argv) == 1  # "{1}" is no marker by default: no claim matches
    report = json.loads(capsys.readouterr().out)
    assert (report["pairs"], report["skipped"]) == (0, {"no matching extracted claim": 2})
    report = _calibrate(capsys, *argv[3:], "--marker-pattern", r"\{(\d+)\}")
    assert (report["pairs"], report["skipped"]) == (2, {})
    assert report["confusion"] == {"tp": 1, "fn": 0, "tn": 1, "fp": 0}


def test_calibrate_refuses_a_bad_marker_pattern_before_judging(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text("", encoding="utf-8")
    base = ["calibrate", "--labels", str(labels)]
    assert main([*base, "--marker-pattern", "[("]) == 2
    assert "--marker-pattern is not a valid regex" in capsys.readouterr().err
    assert main([*base, "--marker-pattern", r"\[\d+\]"]) == 2
    assert "--marker-pattern needs a capturing group" in capsys.readouterr().err


def test_the_judges_kappa_is_scikit_learns() -> None:
    """The one κ (:func:`citemon._core.stats.cohen_kappa`), from a confusion matrix."""
    from sklearn.metrics import cohen_kappa_score

    for c in (HAND, Confusion(tp=40, fn=3, tn=11, fp=9), Confusion(tp=5, fn=5, tn=0, fp=1)):
        judge = [True] * c.tp + [False] * c.fn + [False] * c.tn + [True] * c.fp
        human = [True] * c.tp + [True] * c.fn + [False] * c.tn + [False] * c.fp
        assert kappa(c) == pytest.approx(cohen_kappa_score(judge, human), abs=1e-12)
