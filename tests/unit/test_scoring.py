from __future__ import annotations

import pytest

from citemon._checks.selftest import run_shuffle_selftest
from citemon._checks.shuffle import shuffle_citations
from citemon._core.records import AnswerRecord, Passage
from citemon._demo.data import sample_records, specimen
from citemon._engine.claims import extract_claims
from citemon._engine.scoring import Scorer
from citemon._engine.settings import ScoringSettings
from citemon._engine.summary import summarize
from tests.oracles import OracleJudge, YesJudge

C0 = "Audit logs are retained for 90 days on the Business plan."
C1 = "Retention can be extended through a custom term in an Enterprise agreement."
C2 = "Changing it is not possible from the dashboard."
SPECIMEN_TRUTH = {C0: {"p-3310"}, C1: {"p-3312"}, C2: {"p-3311"}}


async def test_the_design_specimen_scores_exactly() -> None:
    judge = OracleJudge(SPECIMEN_TRUTH)
    score = await Scorer(judge).score(specimen())
    s = summarize([score]).as_dict()
    assert s["citation_accuracy"] == 0.3333
    assert s["citation_accuracy_ci95"] == [0.06, 0.79]
    assert s["citation_coverage"] == 1.0
    assert s["faithfulness"] == 1.0
    assert s["ids_per_claim"] == 1.0
    assert s["citation_precision"] == 1.0
    assert s["verdicts"] == {
        "correct": 1,
        "misattributed": 2,
        "multi_hop": 0,
        "unsupported": 0,
        "dangling": 0,
        "unjudged": 0,
        "uncited": 0,
    }
    assert [c.verdict for c in score.claims] == ["correct", "misattributed", "misattributed"]
    assert [c.supported_by for c in score.claims] == [["p-3310"], ["p-3312"], ["p-3311"]]
    assert all(c.faithful for c in score.claims)
    # The second claim's citation check showed the judge p-3310 and nothing else.
    assert judge.calls[[c for c, _ in judge.calls].index(C1)] == (C1, ("p-3310",))
    # A claim that passes its citation check costs one call: no faithfulness call.
    assert [shown for claim, shown in judge.calls if claim == C0] == [("p-3310",)]


def _record(answer: str, n: int = 3, **kw: object) -> AnswerRecord:
    passages = [Passage(id=f"p{i}", text=f"passage {i}") for i in range(1, n + 1)]
    return AnswerRecord(answer=answer, passages=passages, **kw)  # type: ignore[arg-type]


async def test_failure_taxonomy() -> None:
    rec = _record("Alpha [p1]. Beta [p1]. Gamma [p1]. Delta [p9]. Epsilon. Zeta [p1].")
    judge = OracleJudge(
        {"Alpha.": {"p1"}, "Beta.": {"p2"}, "Delta.": {"p1"}, "Epsilon.": {"p3"}},
        joint={"Gamma.": {"p2", "p3"}},
    )
    score = await Scorer(judge).score(rec)
    got = {c.text: (c.verdict, c.supported_by, c.faithful) for c in score.claims}
    assert got == {
        "Alpha.": ("correct", ["p1"], True),
        "Beta.": ("misattributed", ["p2"], True),
        "Gamma.": ("multi_hop", [], True),
        "Delta.": ("dangling", [], True),
        "Epsilon.": ("uncited", [], True),
        "Zeta.": ("unsupported", [], False),
    }
    s = summarize([score]).as_dict()
    assert s["citation_accuracy"] == round(1 / 5, 4)
    assert s["citation_coverage"] == round(5 / 6, 4)
    assert s["faithfulness"] == round(5 / 6, 4)


async def test_dangling_only_when_the_valid_cited_ids_fail() -> None:
    # docs/design.md: dangling = cites an ID not retrieved, and its valid cited IDs (if any) fail.
    rec = _record("Alpha [p1][p9]. Beta [p1][p9]. Gamma [p9].")
    judge = OracleJudge({"Alpha.": {"p1"}, "Beta.": {"p2"}, "Gamma.": {"p2"}})
    score = await Scorer(judge).score(rec)
    got = [(c.text, c.cited_ids, c.verdict, c.faithful) for c in score.claims]
    assert got == [
        ("Alpha.", ["p1", "p9"], "correct", True),  # the valid ID entails: not dangling
        ("Beta.", ["p1", "p9"], "dangling", True),  # p2 says it, but an ID was made up
        ("Gamma.", ["p9"], "dangling", True),
    ]
    s = summarize([score]).as_dict()
    assert s["citation_accuracy"] == 0.3333 and s["verdicts"]["dangling"] == 2


async def test_unsupported_claim_skips_the_per_passage_search() -> None:
    judge = OracleJudge({})
    await Scorer(judge).score(_record("Made up [p1]."))
    assert [shown for _, shown in judge.calls] == [("p1",), ("p1", "p2", "p3")]


async def test_policy_single_fails_a_multi_id_citation() -> None:
    rec = _record("Alpha [p1, p2].")
    judge = OracleJudge({"Alpha.": {"p1"}})
    any_of = await Scorer(judge).score(rec)
    single = await Scorer(judge, ScoringSettings(policy="single")).score(rec)
    assert any_of.claims[0].verdict == "correct"
    assert any_of.claims[0].irrelevant_ids == ["p2"]
    assert single.claims[0].verdict == "misattributed"
    assert single.claims[0].supported_by == ["p1"]


async def test_over_broad_citation_precision() -> None:
    rec = _record("Alpha [p1, p2, p3]. Beta [p1].")
    judge = OracleJudge({"Alpha.": {"p1", "p2"}, "Beta.": {"p1"}})
    score = await Scorer(judge).score(rec)
    assert score.claims[0].irrelevant_ids == ["p3"]
    s = summarize([score]).as_dict()
    assert s["citation_precision"] == 0.75  # 3 of 4 citations on correct claims are precise
    assert s["ids_per_claim"] == 2.0


async def test_judge_failure_is_unjudged_and_excluded_from_ratios() -> None:
    rec = _record("Alpha [p1]. Beta [p1]. Gamma.")
    judge = OracleJudge({"Alpha.": {"p1"}, "Gamma.": {"p1"}}, fail_on={"Beta.", "Gamma."})
    score = await Scorer(judge).score(rec)
    assert [c.verdict for c in score.claims] == ["correct", "unjudged", "uncited"]
    assert score.claims[1].reason and "judge failed" in score.claims[1].reason
    assert score.claims[2].faithful is None
    s = summarize([score]).as_dict()
    assert s["cited_claims"] == 1
    assert s["citation_accuracy"] == 1.0
    assert s["faithfulness"] == 1.0
    assert s["verdicts"]["unjudged"] == 1


async def test_truncated_input_never_blames_a_citation() -> None:
    rec = _record("Alpha [p1]. Beta [p1]. Gamma [p7].", truncated=True)
    score = await Scorer(OracleJudge({"Alpha.": {"p1"}})).score(rec)
    assert [c.verdict for c in score.claims] == ["correct", "unjudged", "unjudged"]


async def test_overlapping_chunks_flag_the_misattribution() -> None:
    shared = " ".join(f"w{i}" for i in range(15))
    rec = AnswerRecord(
        answer="Claim [p1].",
        passages=[Passage(id="p1", text=f"start {shared}"), Passage(id="p2", text=f"{shared} end")],
    )
    score = await Scorer(OracleJudge({"Claim.": {"p2"}})).score(rec)
    assert score.claims[0].verdict == "misattributed"
    assert score.claims[0].overlap is True
    assert summarize([score]).overlap_misattributions == 1
    narrow = await Scorer(
        OracleJudge({"Claim.": {"p2"}}), ScoringSettings(overlap_tokens=16)
    ).score(rec)
    assert narrow.claims[0].overlap is False


async def test_shuffle_moves_accuracy_not_faithfulness() -> None:
    rec = AnswerRecord(
        answer="Alpha [p1]. Beta [p2]. Gamma [p3].",
        passages=[Passage(id=f"p{i}", text=f"t{i}") for i in (1, 2, 3)],
    )
    judge = OracleJudge({"Alpha.": {"p1"}, "Beta.": {"p2"}, "Gamma.": {"p3"}})
    scorer = Scorer(judge)
    claims = extract_claims(rec)
    correct = summarize([await scorer.score(rec, shuffle_citations(claims, [0, 1, 2]))]).as_dict()
    rotated = summarize([await scorer.score(rec, shuffle_citations(claims, [1, 2, 0]))]).as_dict()
    assert correct["citation_accuracy"] == 1.0
    assert rotated["citation_accuracy"] == 0.0
    assert correct["faithfulness"] == rotated["faithfulness"] == 1.0
    with pytest.raises(ValueError, match="permutation"):
        shuffle_citations(claims, [0, 0, 1])


async def test_shuffle_selftest_catches_a_judge_that_says_yes_to_everything() -> None:
    records = sample_records()
    truth: dict[str, set[str]] = {}
    for r in records:
        for label in r.labels or []:
            if label["verdict"] in ("correct", "misattributed", "uncited"):
                truth.setdefault(label["claim"], set()).update(
                    label.get("supported_by")
                    or ([label["cited_ids"][0]] if label["verdict"] == "correct" else [])
                )
    reading = await run_shuffle_selftest(Scorer(OracleJudge(truth)), records)
    blind = await run_shuffle_selftest(Scorer(YesJudge()), records)
    assert reading.passed()
    assert reading.faithfulness_shift == 0.0
    assert not blind.passed()
    assert blind.accuracy_drop == 0.0


async def test_many_answers_concurrently_keep_their_order() -> None:
    records = sample_records()
    judge = OracleJudge({})
    scores = await Scorer(judge).score_many(records, max_concurrent_answers=4)
    assert [s.id for s in scores] == [r.id for r in records]


class SplittingOracle(OracleJudge):
    """An oracle that also decomposes sentences on ' and ' (what --decompose llm asks for)."""

    async def decompose(self, sentence: str) -> list[str]:
        if "fail" in sentence:
            from citemon._core.errors import JudgeInvalidReply

            raise JudgeInvalidReply("no JSON")
        head, _, tail = sentence.rstrip(".").partition(" and ")
        return [f"{head}.", f"{tail}."] if tail else [sentence]


async def test_llm_decomposition_keeps_citations_and_sentence_index() -> None:
    rec = _record("Alpha and Beta [p1]. Gamma fail [p2].")
    judge = SplittingOracle({"Alpha.": {"p1"}, "Beta.": {"p2"}, "Gamma fail.": {"p2"}})
    score = await Scorer(judge, ScoringSettings(decompose="llm")).score(rec)
    got = [(c.sentence, c.text, c.cited_ids, c.verdict) for c in score.claims]
    assert got == [
        (0, "Alpha.", ["p1"], "correct"),
        (0, "Beta.", ["p1"], "misattributed"),
        (1, "Gamma fail.", ["p2"], "correct"),  # decomposition failed: the sentence stands
    ]


def test_llm_decomposition_needs_a_judge_that_decomposes() -> None:
    from citemon._core.errors import ConfigError

    with pytest.raises(ConfigError, match="decompose"):
        Scorer(OracleJudge({}), ScoringSettings(decompose="llm"))


def test_verdict_names_are_the_design_pages() -> None:
    """The seven verdicts, in the design page's order (docs/design.md), everywhere a verdict is
    named."""
    import typing

    from citemon._core.records import VERDICTS, VerdictName
    from tests.unit.test_deploy import design_table_names

    design = ("correct", "misattributed", "multi_hop", "unsupported", "dangling", "unjudged",
              "uncited")  # fmt: skip
    assert design == VERDICTS
    assert typing.get_args(VerdictName) == design
    assert tuple(summarize([]).as_dict()["verdicts"]) == design
    assert design_table_names("Verdicts") == design
