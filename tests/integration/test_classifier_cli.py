"""``citemon score`` and ``citemon calibrate`` with ``--judge classifier`` against the
TEI-shaped loopback server (tests/tei_server.py), whose scores are known exactly."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from citemon._core.records import AnswerRecord, Verdict
from citemon._demo.data import sample_records
from citemon._engine.scoring import Scorer
from citemon.cli import main
from tests.tei_server import TEIServer, share_score

PASSAGE = "alpha bravo charlie delta echo"
# (claim, human label, the server's score against PASSAGE)
LABELLED = [
    ("alpha bravo charlie delta echo", "supported", 1.0),
    ("alpha bravo charlie delta foxtrot", "supported", 0.8),
    ("alpha bravo golf hotel india", "supported", 0.4),
    ("alpha lima mike november oscar", "not_supported", 0.2),
    ("papa quebec romeo sierra tango", "not_supported", 0.0),
    ("uniform victor whiskey xray yankee", "not_supported", 0.0),
]


@pytest.fixture
def tei() -> Iterator[TEIServer]:
    with TEIServer().in_thread() as server:
        yield server


class ShareJudge:
    """The server's rule in-process (one chunk: the sample's passages are short)."""

    def __init__(self, threshold: float = 0.5) -> None:
        self.threshold = threshold

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        p = share_score("\n\n".join(passages.values()), claim)
        return Verdict(entailed=p >= self.threshold, confidence=p)


def _write(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _flags(server: TEIServer) -> list[str]:
    return ["--judge", "classifier", "--judge-base-url", server.base_url]


def test_score_with_the_classifier_gives_the_servers_verdicts(
    tei: TEIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = sample_records()
    src = _write(tmp_path / "s.jsonl", [r.model_dump_json() for r in records])
    assert main(["score", str(src), "--format", "json", *_flags(tei)]) == 0
    out = json.loads(capsys.readouterr().out)
    got = Counter(c["verdict"] for a in out["answers"] for c in a["claims"])
    expected_scores = asyncio.run(Scorer(ShareJudge()).score_many(records))
    expected = Counter(c.verdict for s in expected_scores for c in s.claims)
    assert got == expected and got["unjudged"] == 0
    assert sum(got.values()) == out["summary"]["claims"] > 100
    # Batched: the whole sample took far fewer requests than it has (claim, passage) checks.
    assert 0 < len(tei.requests) < out["summary"]["claims"]
    assert all(r.path == "/predict" for r in tei.requests)


def _labels(tmp_path: Path) -> Path:
    rows = [json.dumps({"claim": c, "passage": PASSAGE, "label": lab}) for c, lab, _ in LABELLED]
    return _write(tmp_path / "labels.jsonl", rows)


def _record(claim: str) -> str:
    return AnswerRecord.model_validate(
        {"id": "a", "answer": f"{claim}. [p1]", "passages": [{"id": "p1", "text": PASSAGE}]}
    ).model_dump_json()


def test_calibrate_chooses_a_threshold_and_score_applies_it(
    tei: TEIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels, calib = _labels(tmp_path), tmp_path / "calib.json"
    argv = ["calibrate", "--labels", str(labels), "--format", "json", "--output", str(calib)]
    assert main([*argv, *_flags(tei)]) == 0
    report = json.loads(capsys.readouterr().out)
    # At the default 0.5 the 0.4 claim is missed; every entailed pair outscores every other,
    # and the best cut (0.4) sits above the next score down (0.2): threshold 0.3.
    assert report["confusion"] == {"tp": 2, "fn": 1, "tn": 3, "fp": 0}
    assert report["confidence_means"] == "entailed"
    assert report["roc_auc"] == 1.0
    assert report["threshold"] == pytest.approx(0.3)
    assert report["threshold_confusion"] == {"tp": 3, "fn": 0, "tn": 3, "fp": 0}
    saved = json.loads(calib.read_text())
    assert saved["threshold"] == pytest.approx(0.3) and saved["judge"] == "classifier"
    assert (saved["tp"], saved["fn"], saved["tn"], saved["fp"]) == (3, 0, 3, 0)

    src = _write(tmp_path / "in.jsonl", [_record("alpha bravo golf hotel india")])

    def verdict(*extra: str) -> str:
        assert main(["score", str(src), "--format", "json", *_flags(tei), *extra]) == 0
        claims = json.loads(capsys.readouterr().out)["answers"][0]["claims"]
        return str(claims[0]["verdict"])

    assert verdict() != "correct"  # 0.4 < 0.5
    assert verdict("--calibration", str(calib)) == "correct"  # 0.4 >= 0.3
    assert verdict("--calibration", str(calib), "--judge-threshold", "0.9") != "correct"


def test_calibrate_table_names_the_threshold_and_no_threshold_keeps_the_judges_rule(
    tei: TEIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labels, calib = _labels(tmp_path), tmp_path / "own.json"
    argv = ["calibrate", "--labels", str(labels), "--output", str(calib), "--no-threshold"]
    assert main([*argv, *_flags(tei)]) == 0
    out = capsys.readouterr().out
    assert "ROC AUC              1.000" in out
    assert "threshold maximising balanced accuracy: P(entailed) >= 0.300" in out
    assert f"calibration written to {calib}\n" in out + "\n"
    saved = json.loads(calib.read_text())
    assert saved["threshold"] is None and (saved["tp"], saved["fn"]) == (2, 1)


def test_bad_classifier_options_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _write(tmp_path / "in.jsonl", [_record("alpha bravo")])
    base = ["score", str(src), "--judge", "classifier"]
    assert main([*base, "--judge-overlap-words", "300"]) == 2
    assert "--judge-overlap-words" in capsys.readouterr().err
    assert main([*base, "--judge-threshold", "1.5"]) == 2
    assert "--judge-threshold must be in [0, 1]" in capsys.readouterr().err
    assert main([*base, "--judge-batch-pairs", "0"]) == 2
    assert main(["score", str(src), "--judge", "lexical", "--judge-threshold", "0.4"]) == 2
    assert "does not say what its confidence means" in capsys.readouterr().err
