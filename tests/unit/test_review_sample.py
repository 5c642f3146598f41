"""The review sample: which answers, what a review record holds, `score --review-output`,
`review pull` from files, and `calibrate --review-records` on bad input."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from citemon._checks.shuffle_probe import probe_selected
from citemon._core.records import Passage
from citemon._demo.data import sample_records, specimen
from citemon._engine.scoring import Scorer
from citemon._review.model import Label, ReviewRecord, append_label, read_review_records
from citemon._review.sample import review_key, review_record, review_selected
from citemon._service.answers import ratio_bound, trace_id_sampled
from citemon._service.outputs import review_message
from citemon._service.settings import Settings
from citemon.cli import main
from citemon.judges.lexical import LexicalJudge


def _trace_ids(n: int) -> list[str]:
    rng = random.Random(18)
    return [f"{rng.getrandbits(128):032x}" for _ in range(n)]


def test_review_choice_is_independent_of_sampling_and_the_canary() -> None:
    ids = _trace_ids(20_000)
    review = {t for t in ids if review_selected(t, 0.1)}
    sampled = {t for t in ids if trace_id_sampled(t, ratio_bound(0.5))}
    canary = {t for t in ids if probe_selected(t, 0.1)}
    assert 1900 < len(review) < 2100
    # Independent hashes: a tenth of the sampled half, a tenth of the canary's tenth.
    assert 900 < len(review & sampled) < 1100
    assert 150 < len(review & canary) < 250
    # Nested in the rate, never without an ID, all at 1.
    assert {t for t in ids if review_selected(t, 0.05)} <= review
    assert not review_selected(None, 1.0) and not review_selected("", 1.0)
    assert all(review_selected(t, 1.0) for t in ids[:100])
    assert not any(review_selected(t, 0.0) for t in ids[:100])


async def test_a_review_record_holds_what_a_reviewer_needs_cut_at_the_cap() -> None:
    record = specimen()
    long_text = record.passage_map()["p-3312"] + " " + "x" * 5000
    record.passages[2] = Passage(id="p-3312", text=long_text)
    record.trace_id = "0af7651916cd43dd8448eb211c80319c"
    score = await Scorer(LexicalJudge()).score(record)
    review = review_record(score, span_id="b7ad6b7169203331", passage_chars=100)
    assert review.trace_id == record.trace_id and review.span_id == "b7ad6b7169203331"
    assert (review.question, review.answer) == (record.question, record.answer)
    assert (review.service, review.version) == ("support-bot", "2026.11.3")
    assert [c.claim for c in review.claims] == [0, 1, 2]
    assert [c.verdict for c in review.claims] == [c.verdict for c in score.claims]
    assert set(review.passages) == {"p-3310", "p-3312"}  # cited or supporting
    assert review.passages["p-3310"] == record.passage_map()["p-3310"]
    assert review.passages_cut == ["p-3312"]
    assert len(review.passages["p-3312"]) <= 100 and review.passages["p-3312"].endswith("…")
    # At the default cap the scorer's 4000-character excerpt is kept, and marked cut.
    whole = review_record(score)
    assert whole.passages_cut == ["p-3312"] and len(whole.passages["p-3312"]) == 4000
    assert ReviewRecord.model_validate_json(whole.to_json()) == whole


async def test_the_pipeline_message_is_keyed_by_trace_id_only_when_chosen() -> None:
    record = specimen()
    record.trace_id = "0af7651916cd43dd8448eb211c80319c"
    score = await Scorer(LexicalJudge()).score(record)
    off = Settings(review_rate=0.0)
    assert review_message(score, None, off) is None
    on = Settings(review_rate=1.0, review_topic="rev", review_passage_chars=50)
    assert on.transactional and not off.transactional
    message = review_message(score, "b7ad6b7169203331", on)
    assert message is not None and message.topic == "rev"
    assert message.key == record.trace_id.encode()
    body = ReviewRecord.model_validate_json(message.value)
    assert body.span_id == "b7ad6b7169203331" and body.scored_at
    assert all(len(text) <= 50 for text in body.passages.values())


def test_settings_reject_a_review_rate_or_cap_out_of_range() -> None:
    with pytest.raises(ValueError, match="review_rate"):
        Settings(review_rate=1.5)
    with pytest.raises(ValueError, match="review_passage_chars"):
        Settings(review_passage_chars=4001)


def _answers(path: Path) -> Path:
    path.write_text("".join(r.model_dump_json() + "\n" for r in sample_records()), encoding="utf-8")
    return path


def test_score_writes_review_records_for_the_chosen_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _answers(tmp_path / "in.jsonl")
    every, some = tmp_path / "all.jsonl", tmp_path / "some.jsonl"
    assert main(["score", str(src), "--review-output", str(every)]) == 0
    assert main(["score", str(src), "--review-output", str(some), "--review-rate", "0.3"]) == 0
    records = sample_records()
    got = read_review_records(every)
    assert [r.trace_id for r in got] == [r.id for r in records]  # offline: keyed by id
    picked = [r.id for r in records if review_selected(r.id, 0.3)]
    assert [r.trace_id for r in read_review_records(some)] == picked
    assert 0 < len(picked) < len(records)
    assert f"{len(records)} review record(s) written" in capsys.readouterr().err


def test_score_refuses_a_bad_review_rate_before_scoring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _answers(tmp_path / "in.jsonl")
    out = tmp_path / "r.jsonl"
    assert main(["score", str(src), "--review-output", str(out), "--review-rate", "2"]) == 2
    assert "--review-rate must be within [0, 1]" in capsys.readouterr().err
    assert not out.exists()


def test_an_answer_without_ids_is_keyed_by_its_text() -> None:
    from citemon._core.records import AnswerScore

    score = AnswerScore()
    score._answer = "An answer."
    assert review_key(score).startswith("answer-")
    assert review_key(score) == review_key(score)


def _pool(path: Path) -> list[ReviewRecord]:
    out = []
    for i in range(40):
        out.append(
            ReviewRecord(
                trace_id=f"{i:032x}",
                service="bot" if i % 2 else "other",
                version=f"v{i % 3}",
                scored_at=f"2026-12-01T{10 + i % 4:02d}:00:00+00:00",
                answer=f"answer {i}",
            )
        )
    path.write_text("".join(r.to_json() + "\n" for r in [*out, out[0]]), encoding="utf-8")
    return out


def test_pull_filters_samples_by_seed_and_keeps_each_answer_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = _pool(tmp_path / "pool.jsonl")
    base = ["review", "pull", "--input", str(tmp_path / "pool.jsonl")]

    def pull(*extra: str) -> list[str]:
        out = tmp_path / "set.jsonl"
        assert main([*base, *extra, "--output", str(out)]) == 0
        return [r.trace_id for r in read_review_records(out)]

    everything = pull("--size", "0")
    assert sorted(everything) == sorted(r.trace_id for r in pool)  # the duplicate once
    five = pull("--size", "5", "--seed", "3")
    assert len(five) == 5 and pull("--size", "5", "--seed", "3") == five
    assert pull("--size", "5", "--seed", "4") != five
    assert five == pull("--size", "0", "--seed", "3")[:5]  # the lowest ranks, in order
    bot_v1 = pull("--size", "0", "--service", "bot", "--version", "v1")
    assert sorted(bot_v1) == sorted(
        r.trace_id for r in pool if r.service == "bot" and r.version == "v1"
    )
    window = pull(
        "--size", "0", "--since", "2026-12-01T11:00:00Z", "--until", "2026-12-01T13:00:00Z"
    )
    assert sorted(window) == sorted(
        r.trace_id for r in pool if r.scored_at and r.scored_at[11:13] in ("11", "12")
    )
    assert "41 read" in capsys.readouterr().err


def test_pull_refuses_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _pool(tmp_path / "pool.jsonl")
    base = ["review", "pull", "--input", str(tmp_path / "pool.jsonl"), "-o", "-"]
    assert main([*base, "--size", "-1"]) == 2
    assert main([*base, "--since", "yesterday"]) == 2
    assert main([*base, "--since", "1h", "--until", "2h"]) == 2
    err = capsys.readouterr().err
    assert "--size must be 0 or more" in err and "--since 'yesterday'" in err
    assert "is not after --since" in err


def test_calibrate_on_production_labels_names_bad_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = tmp_path / "pool.jsonl"
    _pool(pool)
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"trace_id": "x", "claim": 0}\n')
    args = ["calibrate", "--labels", str(labels), "--review-records", str(pool)]
    assert main(args) == 2
    assert "labels.jsonl:1: not a label" in capsys.readouterr().err
    labels.write_text("")
    append_label(
        labels, Label(trace_id="nowhere", claim=0, text="t", label="entailed", reviewer="r")
    )
    assert main(args) == 1  # nothing matched: said, not a crash
    captured = capsys.readouterr()
    assert "1  label of a claim in no review record" in captured.out
    assert "no label matches" in captured.err


async def test_a_score_from_the_cpu_workers_keeps_what_the_review_record_needs() -> None:
    from concurrent.futures import ThreadPoolExecutor

    record = specimen()
    with ThreadPoolExecutor(1) as pool:
        score = await Scorer(LexicalJudge(), executor=pool).score(record)
    review = review_record(score)
    assert (review.question, review.answer) == (record.question, record.answer)
    assert review.passages["p-3310"] == record.passage_map()["p-3310"]
