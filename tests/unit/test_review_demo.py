"""The review loop's worked example (docs/review.md): the demo's review set, labelled with the
demo's truth, gives the estimates the page shows.

``citemon demo --offline --review DIR`` scores 150 answers of v1 and 150 of the v2 deploy
(whose every claim cites the first passage) with planted checker faults (overlapping chunks,
fused claims),
writes their review records and pulls a set of 50; ``scripts/label_demo_review.py`` labels
the set as a careful reader would; ``citemon calibrate --labels --review-records`` must then
say that the planted faults are the checker's, v2's misattributions the pipeline's, and PPI++'s
interval is never wider than the labels' alone (narrower where the verdicts carry information).
"""

from __future__ import annotations

import json
import runpy
from collections import Counter
from pathlib import Path

import pytest

from citemon._review.estimates import Estimates
from citemon._review.model import read_labels, read_review_records
from citemon.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def worked_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("review")
    assert main(["demo", "--offline", "--review", str(directory)]) == 0
    script = runpy.run_path(str(REPO / "scripts" / "label_demo_review.py"))
    n = script["label_review_set"](directory / "review-set.jsonl", directory / "labels.jsonl")
    assert n == 150  # every cited claim of the 50 answers
    return directory


def _estimates(directory: Path, capsys: pytest.CaptureFixture[str]) -> Estimates:
    capsys.readouterr()
    code = main(
        [
            "calibrate",
            "--labels", str(directory / "labels.jsonl"),
            "--review-records", str(directory / "review-records.jsonl"),
            "--format", "json",
        ]
    )  # fmt: skip
    assert code == 0
    return Estimates.model_validate(json.loads(capsys.readouterr().out))


def test_the_review_set_is_50_answers_of_the_pool_and_reproducible(worked_example: Path) -> None:
    pool = read_review_records(worked_example / "review-records.jsonl")
    chosen = read_review_records(worked_example / "review-set.jsonl")
    assert len(pool) == 300 and len(chosen) == 50
    assert {r.trace_id for r in chosen} <= {r.trace_id for r in pool}
    again = worked_example / "again.jsonl"
    args = ["review", "pull", "--input", str(worked_example / "review-records.jsonl")]
    assert main([*args, "--seed", "0", "--output", str(again)]) == 0
    assert again.read_text() == (worked_example / "review-set.jsonl").read_text()


def test_checker_faults_are_the_checkers_and_v2_misattributions_the_pipelines(
    worked_example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _estimates(worked_example, capsys)
    groups = {g.version: g for g in report.groups}
    v1, v2, everything = groups["v1"], groups["v2"], groups[None]
    labels = read_labels(worked_example / "labels.jsonl")
    planted = {
        version: Counter(
            x.checker
            for x in labels
            if x.version == version and x.checker is not None and x.verdict != "correct"
        )
        for version in ("v1", "v2")
    }
    # Every planted fault that citemon failed is counted as the checker's, nothing else is.
    assert v1.checker_causes == dict(planted["v1"]) == {"overlap": 3, "fused": 3}
    assert v2.checker_causes == dict(planted["v2"]) == {"overlap": 4, "fused": 2}
    # v2's misattributions (the first-passage bug) are the pipeline's.
    v2_misattributed = [
        x for x in labels if x.version == "v2" and x.verdict == "misattributed" and not x.checker
    ]
    assert all(x.label == "not_entailed" for x in v2_misattributed)
    assert v2.failed_labelled == 47
    assert v2.pipeline_faults is not None and v2.checker_faults is not None
    assert v2.pipeline_faults.value == pytest.approx(41 / 47)
    assert v2.checker_faults.value == pytest.approx(6 / 47)
    assert v1.pipeline_faults is not None and v1.pipeline_faults.value == pytest.approx(4 / 10)
    # The judge on this traffic and the accuracy a person would report.
    assert (v1.tp, v1.fn, v1.fp, v1.tn) == (73, 3, 0, 4)
    assert (v2.tp, v2.fn, v2.fp, v2.tn) == (19, 4, 0, 41)
    assert v1.human_accuracy is not None and v1.human_accuracy.value == pytest.approx(76 / 83)
    # The fused sentences are the extractor's errors: not one claim, cause fused.
    assert everything.fused is not None and everything.fused.value == pytest.approx(6 / 150)
    assert everything.not_a_claim is not None and everything.not_a_claim.value == pytest.approx(
        6 / 150
    )


def test_ppi_interval_is_narrower_than_the_labels_alone(
    worked_example: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _estimates(worked_example, capsys)

    def width(ci: tuple[float, float]) -> float:
        return ci[1] - ci[0]

    for g in report.groups:
        assert g.ppi_accuracy is not None and g.human_accuracy is not None
        ppi, human = width(g.ppi_accuracy.ci95), width(g.human_accuracy.ci95)
        print(f"\n{g.version}: PPI++ {ppi:.3f} vs labels {human:.3f}, lambda {g.ppi_lambda:.3f}")
        assert ppi <= human + 1e-12
        if g.version != "v2":  # v2's answers all fail alike: the verdicts add nothing there
            assert ppi < 0.75 * human
            assert g.effective_labels is not None and g.effective_labels > 2 * g.labelled_claims
