from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from citemon._demo.data import sample_records, specimen
from citemon.cli import main


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_score_json_matches_the_design_contract(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write(tmp_path / "in.jsonl", [specimen().model_dump_json()])
    assert (
        main(["score", str(src), "--format", "json", "--judge", "tests.oracles:specimen_judge"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["summary"] == {
        "answers": 1, "claims": 3, "cited_claims": 3,
        "citation_accuracy": 0.3333, "citation_accuracy_ci95": [0.06, 0.79],
        "citation_coverage": 1.0, "citation_coverage_ci95": [0.44, 1.0],
        "faithfulness": 1.0, "ids_per_claim": 1.0, "citation_precision": 1.0,
        "policy": "any_of", "overlap_misattributions": 0,
        "misattribution_patterns": {"off_by_one": 0, "first_retrieved": 1,
                                    "previous_citation": 0, "same_document": 0, "other": 1},
        "multi_hop_ceiling": 1.0,
        "verdicts": {"correct": 1, "misattributed": 2, "multi_hop": 0, "unsupported": 0,
                     "dangling": 0, "unjudged": 0, "uncited": 0},
    }  # fmt: skip
    (answer,) = out["answers"]
    assert answer["id"] == "a-1"
    assert answer["claims"][1] == {
        "sentence": 1,
        "text": "Retention can be extended through a custom term in an Enterprise agreement.",
        "cited_ids": ["p-3310"],
        "resolved_ids": ["p-3310"],
        "verdict": "misattributed",
        "supported_by": ["p-3312"],
        "faithful": True,
        "overlap": False,
        "irrelevant_ids": [],
        "reason": None,
        "unjudged_cause": None,
        "search_cut": 0,
        "pattern": "first_retrieved",
    }
    # The specimen's two misattributions: the second claim cites the top-ranked passage
    # (p-3310, also what the claim before it cites; first_retrieved comes first), the third
    # cites p-3312 for p-3311's claim: a shift of +1 alone (one offset needs two claims to be
    # named), another document (legal/enterprise.md against security/audit-logs.md): other.
    assert "pattern" not in answer["claims"][0]
    assert answer["claims"][2]["pattern"] == "other"
    assert answer["judge_calls"] == 9 and answer["judge_calls_cut"] == 0


def test_bad_lines_are_reported_and_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = specimen().model_dump_json()
    src = write(tmp_path / "in.jsonl", [good, "{not json", '{"answer": "no passages"}', "", good])
    assert (
        main(["score", str(src), "--format", "json", "--judge", "tests.oracles:specimen_judge"])
        == 1
    )
    captured = capsys.readouterr()
    assert json.loads(captured.out)["summary"]["answers"] == 2
    assert "line 2: not valid JSON" in captured.err
    assert "line 3: passages: Field required" in captured.err
    assert "2 bad input line(s) skipped" in captured.err


def test_strict_aborts_on_the_first_bad_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write(tmp_path / "in.jsonl", [specimen().model_dump_json(), '{"answer": 3}'])
    assert main(["score", str(src), "--strict"]) == 2
    assert "line 2" in capsys.readouterr().err


def test_stdin_and_table(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(specimen().model_dump_json() + "\n"))
    assert main(["score", "-", "--explain", "--judge", "tests.oracles:specimen_judge"]) == 0
    out = capsys.readouterr().out
    assert "misattributed  p-3310 → p-3312" in out
    assert "citation accuracy 0.33 [0.06, 0.79] · coverage 1.00 · faithfulness 1.00" in out


def test_unknown_judge_and_missing_file_are_clear_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["score", "/nonexistent.jsonl"]) == 2
    assert "no such file: /nonexistent.jsonl" in capsys.readouterr().err
    assert main(["score", "-", "--judge", "nosuch"]) == 2
    assert "unknown judge 'nosuch'" in capsys.readouterr().err
    assert main(["score", "-", "--judge", "tests.oracles:missing"]) == 2
    assert "cannot load judge factory" in capsys.readouterr().err


def test_selftest_passes_a_reading_judge_and_fails_a_blind_one(tmp_path: Path) -> None:
    src = write(tmp_path / "s.jsonl", [r.model_dump_json() for r in sample_records()])
    assert main(["selftest", str(src)]) == 0
    assert main(["selftest", str(src), "--judge", "tests.oracles:yes_judge"]) == 1


def test_the_lexical_judge_on_the_sample_agrees_with_its_construction() -> None:
    # The sample's labels say what each claim's verdict should be; the heuristic gets most right.
    import asyncio

    from citemon._engine.scoring import Scorer
    from citemon.judges.lexical import LexicalJudge

    records = sample_records()
    scores = asyncio.run(Scorer(LexicalJudge()).score_many(records))
    pairs = [
        (label["verdict"], claim.verdict)
        for record, score in zip(records, scores, strict=True)
        for label, claim in zip(record.labels or [], score.claims, strict=True)
    ]
    agree = sum(a == b for a, b in pairs) / len(pairs)
    assert len(pairs) == 155
    assert agree >= 0.9, agree


def test_calibration_adds_a_corrected_accuracy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from citemon._core.calibration import Calibration

    src = write(tmp_path / "s.jsonl", [r.model_dump_json() for r in sample_records()])
    calib = tmp_path / "calib.json"
    # sens 0.9, spec 0.8: an observed rate p maps to (p + 0.8 - 1) / (0.9 + 0.8 - 1).
    Calibration(judge="lexical", tp=90, fn=10, tn=80, fp=20).save(calib)
    assert main(["score", str(src), "--format", "json", "--calibration", str(calib)]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    observed = summary["citation_accuracy"]
    assert summary["citation_accuracy_corrected"] == pytest.approx(
        min(1.0, (observed - 0.2) / 0.7), abs=1e-3
    )
    lo, hi = summary["citation_accuracy_corrected_ci95"]
    assert lo < summary["citation_accuracy_corrected"] <= hi
    blind = tmp_path / "blind.json"
    Calibration(judge="yes", tp=50, fn=0, tn=0, fp=50).save(blind)
    assert main(["score", str(src), "--calibration", str(blind)]) == 0
    assert "corrected citation accuracy n/a" in capsys.readouterr().out
    assert main(["score", str(src), "--calibration", str(tmp_path / "missing.json")]) == 2
    assert "cannot read calibration file" in capsys.readouterr().err


def test_scores_a_collector_file_exporter_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from citemon_instrumentation import record_answer
    from tests.otlp_json import otlp_json
    from tests.unit.test_spans import proto

    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "support-bot", "service.version": "v7"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spec = specimen()
    record_answer(
        question=spec.question,
        answer=spec.answer,
        passages=[{"id": p.id, "text": p.text} for p in spec.passages],
        tracer_provider=provider,
    )
    line = otlp_json(proto(exporter.get_finished_spans()))
    src = write(tmp_path / "spans.jsonl", [line, "{broken"])
    argv = ["score", str(src), "--format", "json", "--judge", "tests.oracles:specimen_judge"]
    assert main(argv) == 1  # the broken line is reported and skipped
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["summary"]["citation_accuracy"] == 0.3333
    assert out["answers"][0]["service"] == "support-bot"
    assert out["answers"][0]["version"] == "v7"
    assert "line 2" in captured.err and "not_json" in captured.err
    # The same dump on standard input, format named explicitly.
    monkeypatch.setattr("sys.stdin", io.StringIO(line + "\n"))
    assert main([*argv[:1], "-", "--input-format", "otlp-json", *argv[2:]]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["faithfulness"] == 1.0


def test_the_example_files_are_the_bundled_sample() -> None:
    # examples/ is what the README scores; it must not drift from citemon._demo.data.
    from tests.conftest import REPO

    lines = (REPO / "examples" / "sample.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines == [r.model_dump_json(exclude_none=True) for r in sample_records()]
    spec = (REPO / "examples" / "specimen.jsonl").read_text(encoding="utf-8").strip()
    assert spec == specimen().model_dump_json(exclude_none=True)


def test_specimen_with_the_default_lexical_judge_is_as_the_readme_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # README: the heuristic misses the third claim's paraphrase ("not possible" vs "cannot be
    # configured"), so it is unsupported; the second is still found misattributed.
    src = write(tmp_path / "in.jsonl", [specimen().model_dump_json()])
    assert main(["score", str(src), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    claims = out["answers"][0]["claims"]
    assert [c["verdict"] for c in claims] == ["correct", "misattributed", "unsupported"]
    assert claims[1]["supported_by"] == ["p-3312"]
    assert out["summary"]["citation_accuracy"] == 0.3333
    assert out["summary"]["faithfulness"] == 0.6667
