"""One tally of the metric: every part that reports a ratio asks :class:`Tally`, so they agree."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from citemon._core.records import AnswerScore, ClaimResult, VerdictName
from citemon._core.tally import Tally
from citemon._engine.summary import summarize
from citemon._metrics import Metrics
from citemon._rollout.compare import compare, counts_from_scores
from citemon._service.evaluation_events import evaluation_events


def claim(verdict: VerdictName, ids: int = 1, **kw: object) -> ClaimResult:
    faithful = kw.pop("faithful", verdict in ("correct", "misattributed", "multi_hop"))
    return ClaimResult(
        sentence=0,
        text="t",
        cited_ids=[f"p{i}" for i in range(ids if verdict != "uncited" else 0)],
        verdict=verdict,
        faithful=faithful,
        **kw,  # type: ignore[arg-type]
    )


SCORE = AnswerScore(
    service="s",
    version="v",
    environment="e",
    claims=[
        claim("correct", 2, irrelevant_ids=["p1"]),
        claim("correct"),
        claim("misattributed", overlap=True),
        claim("multi_hop"),
        claim("unsupported", faithful=False),
        claim("uncited", faithful=True),
        claim("uncited", faithful=None, unjudged_cause="judge_failure"),
        claim("unjudged", faithful=None, unjudged_cause="judge_failure"),
    ],
)


def test_the_ratios_of_one_answer() -> None:
    t = Tally.of(SCORE.claims)
    assert (t.cited, t.correct, t.multi_hop, t.uncited, t.judged) == (5, 2, 1, 2, 7)
    assert t.citation_accuracy == 2 / 5
    assert t.citation_coverage == 5 / 7
    assert t.ids_per_claim == 6 / 5
    assert t.citation_precision == (3 - 1) / 3
    assert t.multi_hop_ceiling == 1 - 1 / 5
    assert t.faithfulness == 5 / 6  # of the claims whose faithfulness is known
    assert t.judged_faithfulness == 5 / 7  # the gauge's: of the judged claims
    assert t.citation_accuracy_ci95 is not None and t.citation_accuracy_ci95[0] < 0.4


def test_nothing_to_divide_is_none_never_zero() -> None:
    empty = Tally()
    assert empty.citation_accuracy is None and empty.citation_accuracy_ci95 is None
    assert empty.citation_coverage is None and empty.ids_per_claim is None
    assert empty.faithfulness is None and empty.judged_faithfulness is None
    assert empty.citation_precision is None and empty.multi_hop_ceiling is None
    only_unjudged = Tally.of([claim("unjudged", faithful=None)])
    assert only_unjudged == Tally()  # a judge failure moves no ratio


def test_tallies_add_up() -> None:
    one = Tally.of(SCORE.claims)
    assert one + one == Tally.of([*SCORE.claims, *SCORE.claims])
    total = Tally()
    total += one
    total += one
    assert total == one + one
    assert sum([one, one], Tally()) == total


def test_every_report_gives_the_tallys_numbers() -> None:
    t = Tally.of(SCORE.claims)
    summary = summarize([SCORE]).as_dict()
    assert summary["citation_accuracy"] == round(t.citation_accuracy or 0, 4) == 0.4
    assert summary["citation_coverage"] == round(t.citation_coverage or 0, 4)
    assert summary["faithfulness"] == round(t.faithfulness or 0, 4)
    assert summary["citation_precision"] == round(t.citation_precision or 0, 4)

    registry = CollectorRegistry()
    Metrics(registry).record_answer(SCORE)
    labels = {"service": "s", "version": "v", "environment": "e"}
    gauge = registry.get_sample_value
    assert gauge("citemon_citation_accuracy", labels) == t.citation_accuracy
    assert gauge("citemon_citation_coverage", labels) == t.citation_coverage
    assert gauge("citemon_faithfulness", labels) == t.judged_faithfulness
    assert gauge("citemon_ids_per_claim", labels) == t.ids_per_claim

    counts = counts_from_scores([SCORE.model_dump_json()])
    assert counts["v"] == t
    accuracy = compare(counts, "v", "v").tests[0]
    assert (accuracy.name, accuracy.baseline) == ("citation_accuracy", t.citation_accuracy)

    events = evaluation_events(SCORE, None)
    assert events[0].attributes["gen_ai.evaluation.score.value"] == t.citation_accuracy
    assert events[1].attributes["gen_ai.evaluation.score.value"] == t.faithfulness


def test_the_window_owns_its_counts() -> None:
    """What is added to a window, or read from it, can change afterwards without changing it."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    given, shuffled = Tally(correct=3, cited=4), Tally(correct=1, cited=4)
    metrics.record_probe(given, shuffled)
    given += Tally(correct=100, cited=100)
    read = metrics.probe_totals()
    read.original.correct = 0
    assert metrics.probe_totals().original == Tally(correct=3, cited=4)


def test_a_share_of_cited_claims_is_none_with_nothing_cited() -> None:
    """A misattribution pattern's rate per cited claim (what `compare` tests) comes from the
    tally: None, not 0, when nothing was cited."""
    assert Tally(cited=8, correct=6).per_cited(2) == 0.25
    interval = Tally(cited=8, correct=6).per_cited_ci95(2)
    assert interval is not None and interval[0] < 0.25 < interval[1]
    assert Tally().per_cited(0) is None
    assert Tally().per_cited_ci95(0) is None
