"""How labels count in the production estimates (docs/review.md, "How labels count")."""

from __future__ import annotations

import pytest

from citemon._review.estimates import estimate
from citemon._review.model import Label, ReviewClaim, ReviewRecord
from citemon.cli import build_parser


def _record(trace: str, verdicts: list[str], version: str = "v1") -> ReviewRecord:
    return ReviewRecord(
        trace_id=trace,
        service="bot",
        version=version,
        claims=[
            ReviewClaim(claim=i, sentence=i, text=f"c{i}", cited_ids=["p"], verdict=v)  # type: ignore[arg-type]
            for i, v in enumerate(verdicts)
        ],
    )


def _label(
    trace: str, claim: int, label: str, checker: str | None = None, who: str = "ann"
) -> Label:
    return Label(
        trace_id=trace,
        claim=claim,
        text="t",
        label=label,
        checker=checker,
        reviewer=who,  # type: ignore[arg-type]
    )


def test_labels_count_as_documented() -> None:
    records = [
        _record("a", ["correct", "misattributed", "correct"]),
        _record("b", ["unsupported", "correct", "uncited"]),
        _record("c", ["correct", "correct"]),  # unlabelled: PPI++'s verdicts
    ]
    labels = [
        _label("a", 0, "entailed"),
        _label("a", 1, "not_entailed"),
        _label("a", 2, "partial"),
        _label("a", 0, "not_entailed", who="bob"),  # a second reviewer: the first label counts
        _label("b", 0, "entailed", checker="strict"),
        _label("b", 1, "not_a_claim"),
        _label("b", 2, "entailed"),  # uncited: not in the accuracy
        _label("z", 0, "entailed"),  # no such answer
    ]
    (g,) = estimate(records, labels).groups
    # partial → not supported by default; not_a_claim → not supported, and out of sens/spec.
    assert (g.tp, g.fn, g.fp, g.tn) == (1, 1, 1, 1)
    assert g.labelled_claims == 5 and g.unlabelled_claims == 2
    assert g.human_accuracy is not None and g.human_accuracy.value == pytest.approx(2 / 5)
    assert g.not_a_claim is not None and g.not_a_claim.value == pytest.approx(1 / 6)
    # Failed by citemon and labelled: a/1 (a person agrees: pipeline), b/0 (strict: checker).
    assert g.failed_labelled == 2 and g.checker_causes == {"strict": 1}
    assert g.pipeline_faults is not None and g.pipeline_faults.value == 0.5
    # partial counted as supported moves a/2 into the positives.
    (h,) = estimate(records, labels, partial="entailed").groups
    assert (h.tp, h.fp) == (2, 0)
    (x,) = estimate(records, labels, partial="exclude").groups
    assert x.labelled_claims == 4
    report = estimate(records, labels)
    assert report.skipped == {
        "label of a claim in no review record": 1,
        "further label of an already labelled claim": 1,
    }


def test_versions_are_reported_apart_and_together() -> None:
    records = [_record("a", ["correct"], "v1"), _record("b", ["misattributed"], "v2")]
    labels = [_label("a", 0, "entailed"), _label("b", 0, "not_entailed")]
    groups = estimate(records, labels).groups
    assert [(g.service, g.version) for g in groups] == [("bot", "v1"), ("bot", "v2"), (None, None)]


def test_review_pull_is_a_review_subcommand() -> None:
    args = build_parser().parse_args(["review", "pull", "--input", "x.jsonl", "-o", "-"])
    assert args.command == "review"
    assert args.review_handler.__module__ == "citemon._commands.review.pull"
