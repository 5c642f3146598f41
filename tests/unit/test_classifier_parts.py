"""The classifier judge's pure parts: chunking, reply validation, options, thresholds."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from citemon.cli import build_parser
from citemon.core.errors import ConfigError, JudgeInvalidReply
from citemon.core.records import Verdict
from citemon.judges import (
    JudgeSettings,
    ThresholdJudge,
    entailment_score,
    judge_options,
    load_judge,
)
from citemon.judges.classifier import ClassifierJudge, chunk_words
from citemon.judges.learned import LearnedJudge
from citemon.judges.tei import parse_predictions


def test_a_text_that_fits_is_one_chunk_as_is() -> None:
    text = "  Audit logs\n\nare kept.  "
    assert chunk_words(text, 4, 1) == [text]


def test_chunks_overlap_and_the_last_ends_at_the_last_word() -> None:
    text = " ".join(f"w{n}" for n in range(10))
    assert chunk_words(text, 4, 1) == ["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]
    assert chunk_words(text, 4, 0) == ["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9"]
    # 11 words, step 3: the last window starts at 9 and holds the two words left.
    assert chunk_words(text + " w10", 4, 1)[-1] == "w9 w10"


def test_chunks_keep_the_original_spacing_inside() -> None:
    assert chunk_words("a  b\nc d e", 3, 1) == ["a  b\nc", "c d e"]


@pytest.mark.parametrize(("window", "overlap"), [(0, 0), (3, 3), (3, -1)])
def test_bad_chunking_is_a_config_error(window: int, overlap: int) -> None:
    with pytest.raises(ConfigError):
        chunk_words("a b c d", window, overlap)


def test_parse_predictions_takes_the_label_case_insensitively() -> None:
    reply = '[[{"label": "ENTAILMENT", "score": 0.9}, {"label": "neutral", "score": 0.1}]]'
    assert parse_predictions(reply, pairs=1, label="entailment") == [0.9]


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("not json", "not JSON"),
        ('{"error": "x"}', "not a list of 1 predictions"),
        ("[[], []]", "not a list of 1 predictions"),
        ('[{"label": "entailment", "score": 0.9}]', "prediction 0 is not a list"),
        ('[[{"label": "entailment", "score": 1.5}]]', "prediction 0 holds"),
        ('[[{"label": "entailment", "score": NaN}]]', "prediction 0 holds"),
        ('[[{"label": "entailment", "score": true}]]', "prediction 0 holds"),
        (
            '[[{"label": "entailment", "score": 0.2}, {"label": "Entailment", "score": 0.8}]]',
            "twice",
        ),
    ],
)
def test_parse_predictions_rejects_what_is_not_a_tei_batch_reply(reply: str, why: str) -> None:
    with pytest.raises(JudgeInvalidReply, match=why):
        parse_predictions(reply, pairs=1, label="entailment")


def test_a_missing_label_names_the_models_labels_and_is_not_retried() -> None:
    reply = '[[{"label": "LABEL_1", "score": 0.7}, {"label": "LABEL_0", "score": 0.3}]]'
    with pytest.raises(JudgeInvalidReply, match=r"\['LABEL_0', 'LABEL_1'\]") as caught:
        parse_predictions(reply, pairs=1, label="entailment")
    assert caught.value.retriable is False


def test_flags_and_env_vars_reach_the_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEMON_JUDGE_LABEL", "LABEL_1")
    monkeypatch.setenv("CITEMON_JUDGE_WINDOW_WORDS", "200")
    args = build_parser().parse_args(
        ["score", "-", "--judge", "classifier", "--judge-overlap-words", "20"]
    )
    options = judge_options(args)
    assert (options.label, options.window_words, options.overlap_words) == ("LABEL_1", 200, 20)
    assert (options.batch_pairs, options.threshold) == (32, None)
    assert judge_options(args, calibrated_threshold=0.3).threshold == 0.3
    explicit = build_parser().parse_args(["score", "-", "--judge-threshold", "0.8"])
    assert judge_options(explicit, calibrated_threshold=0.3).threshold == 0.8


def test_a_bad_threshold_env_var_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEMON_JUDGE_THRESHOLD", "high")
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["score", "-"])
    assert caught.value.code == 2


async def test_load_judge_builds_the_classifier_with_its_options() -> None:
    options = JudgeSettings(base_url="http://127.0.0.1:8080", label="LABEL_1", threshold=0.25)
    judge = load_judge("classifier", options)
    assert isinstance(judge, ClassifierJudge)
    assert (judge.label, judge.threshold, judge.batch_pairs) == ("LABEL_1", 0.25, 32)
    assert "base_url='http://127.0.0.1:8080'" in repr(judge)
    await judge.aclose()
    default = load_judge("classifier", JudgeSettings(base_url="http://127.0.0.1:8080"))
    assert isinstance(default, ClassifierJudge) and default.threshold == 0.5
    await default.aclose()


def test_entailment_score_by_what_the_confidence_means() -> None:
    yes, no = Verdict(entailed=True, confidence=0.8), Verdict(entailed=False, confidence=0.8)
    assert entailment_score("entailed", no) == 0.8
    assert entailment_score("verdict", yes) == 0.8
    assert entailment_score("verdict", no) == pytest.approx(0.2)
    assert entailment_score(None, yes) is None
    assert entailment_score("entailed", Verdict(entailed=True)) is None


class _Fixed:
    confidence_means = "verdict"

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        return self.verdict


async def test_threshold_judge_re_decides_from_p_entailed() -> None:
    unsure_no = _Fixed(Verdict(entailed=False, confidence=0.6, reason="r"))  # P = 0.4
    assert (await ThresholdJudge(unsure_no, 0.35).entails("c", {"1": "p"})).entailed is True
    low = await ThresholdJudge(unsure_no, 0.45).entails("c", {"1": "p"})
    assert low.entailed is False and low.confidence == pytest.approx(0.4)
    bare = _Fixed(Verdict(entailed=True))  # no confidence: kept as it is
    assert (await ThresholdJudge(bare, 0.99).entails("c", {})).entailed is True


def test_threshold_judge_refuses_a_judge_that_declares_nothing() -> None:
    with pytest.raises(ConfigError, match="does not say what its confidence means"):
        load_judge("lexical", JudgeSettings(threshold=0.4))
    wrapped = load_judge("learned", JudgeSettings(threshold=0.4))
    assert isinstance(wrapped, ThresholdJudge) and isinstance(wrapped.judge, LearnedJudge)
