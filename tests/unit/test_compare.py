from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from citemon.cli import main
from citemon.demo.data import FAULTS, QUESTIONS, answer
from citemon.engine.scoring import Scorer
from citemon.judges.lexical import LexicalJudge
from citemon.rollout.compare import VersionCounts, compare


def _scores_file(tmp_path: Path, rounds: int = 3) -> Path:
    records = []
    for r in range(rounds):
        for qi, q in enumerate(QUESTIONS):
            for fault in ("correct", "correct", *FAULTS[1:3]):
                records.append(answer(q, fault, f"v1-{r}-{qi}-{fault}", version="v1"))
                records.append(answer(q, fault, f"v2-{r}-{qi}-{fault}", version="v2",
                                      first_passage_bug=True))  # fmt: skip
    scores = asyncio.run(Scorer(LexicalJudge()).score_many(records))
    path = tmp_path / "scores.jsonl"
    path.write_text("\n".join(s.model_dump_json() for s in scores) + "\n", encoding="utf-8")
    return path


def test_compare_flags_the_attribution_bug(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _scores_file(tmp_path)
    assert main(["compare", "--scores", str(path), "--baseline", "v1", "--candidate", "v2",
                 "--format", "json"]) == 1  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "regressed"
    accuracy = next(t for t in out["tests"] if t["metric"] == "citation_accuracy")
    assert accuracy["baseline"] > 0.8 > 0.5 > accuracy["candidate"]
    assert accuracy["p_value"] < 1e-6
    # The other way round the candidate is better.
    assert main(["compare", "--scores", str(path), "--baseline", "v2", "--candidate", "v1"]) == 0
    assert "verdict: improved" in capsys.readouterr().out


def test_same_quality_is_no_evidence_and_small_samples_decide_nothing() -> None:
    same = {"a": VersionCounts(correct=80, cited=100, uncited=10, cited_ids=120),
            "b": VersionCounts(correct=78, cited=100, uncited=11, cited_ids=121)}  # fmt: skip
    assert compare(same, "a", "b").outcome == "no evidence"
    tiny = {"a": VersionCounts(correct=9, cited=10, cited_ids=10),
            "b": VersionCounts(correct=2, cited=10, cited_ids=10)}  # fmt: skip
    assert compare(tiny, "a", "b").outcome == "not enough data"


def test_ids_per_claim_climbing_is_a_regression_even_when_accuracy_holds() -> None:
    counts = {"a": VersionCounts(correct=180, cited=200, uncited=0, cited_ids=240),
              "b": VersionCounts(correct=182, cited=200, uncited=0, cited_ids=680)}  # fmt: skip
    result = compare(counts, "a", "b")
    assert result.outcome == "regressed"
    ids = next(t for t in result.tests if t.name == "ids_per_claim")
    assert ids.baseline == 1.2 and ids.candidate == 3.4
    assert ids.direction(0.05, 0.02) == -1


def test_missing_scores_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--scores", "/nope", "--baseline", "a", "--candidate", "b"]) == 2
    assert "no such file: /nope" in capsys.readouterr().err


def test_prometheus_counts_with_fewer_ids_than_cited_claims() -> None:
    # Counts read back from a real Prometheus in test_alert_e2e: each counter's increase() is
    # extrapolated and rounded on its own, so v2's 294 single-ID claims came back with 293 IDs.
    counts = {"v1": VersionCounts(correct=440, cited=454, uncited=7, cited_ids=460),
              "v2": VersionCounts(correct=98, cited=294, uncited=0, cited_ids=293)}  # fmt: skip
    result = compare(counts, "v1", "v2")
    assert result.outcome == "regressed"  # accuracy 0.97 → 0.33 stands whatever IDs do
    ids = next(t for t in result.tests if t.name == "ids_per_claim")
    assert ids.candidate == pytest.approx(293 / 294)
    assert ids.direction(0.05, 0.02) == 0  # one ID per claim in both: no IDs regression
