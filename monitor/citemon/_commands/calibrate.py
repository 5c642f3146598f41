"""Measure a judge against human labels and write a calibration file for corrected estimates.

Reads labelled JSONL in either shape (detected per line): pairs {claim, passage, label} with
WiCE labels (supported | partially_supported | not_supported), or citemon answer records with
ExpertQA-style `labels` (Complete | Partial | Incomplete | Missing | N/A), whose annotator claims
are matched to citemon's own extracted claims and judged on the passages the label cites; the
answers' citation markers are read with --marker-pattern (as `score` and `run` read them).
Reports the confusion matrix, sensitivity, specificity, balanced accuracy and Cohen's kappa with
95% intervals, what was skipped and why, and the judge's most confident wrong verdicts.
For a judge whose confidence is a P(entailed) (the classifier's entailment score; the learned
judge's verdict probability) it also reports ROC AUC and the threshold that maximises balanced
accuracy, with 95% intervals (stratified bootstrap over the labelled pairs, seeded), and the
confusion matrix at that threshold.

With --output it writes the calibration file that `score` and `run` accept as --calibration:
with the chosen threshold and the counts at it (both commands then apply that threshold), or,
with --no-threshold, the counts of the judge's own verdicts.

On production labels (`citemon review`'s labels file) with --review-records FILE (the review
records the labelled answers were pulled from, and any more of the same sample: their verdicts
are the unlabelled part), it judges nothing and reports per service and version: the judge's
sensitivity and specificity on that traffic, citation accuracy from the labels alone and by
PPI++ (every verdict, rectified by the labels) with 95% intervals clustered by answer and how
many labels PPI++ is worth, the extractor's error rate, and of the claims citemon failed the
share that are pipeline faults and checker faults. --output then writes the judge's verdict
counts on those labels (for --judge, the judge that ran).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import SettingsConfigDict

from citemon._checks.calibration import CalibrationReport, evaluate, judge_pairs
from citemon._checks.labelled_pairs import pairs_from_rows
from citemon._commands._options import add_marker_arguments, citation_syntax
from citemon._core.calibration import Calibration, Confusion
from citemon._core.errors import ConfigError
from citemon._core.human_labels import PartialMapping, read_label_rows
from citemon._core.passages import PassageLookupError
from citemon._core.settings import MAIN, Flag, FlagSettings
from citemon._passages import add_passage_store_arguments, open_store
from citemon._review.estimates import estimate
from citemon._review.model import read_labels, read_review_records
from citemon._review.report import render_estimates
from citemon.judges import add_judge_arguments, judge_options, load_judge

__all__ = ["CalibrateSettings", "add_arguments", "main", "render_table"]


class CalibrateSettings(FlagSettings):
    """``citemon calibrate``'s own flags, each with its variable ``CITEMON_CALIBRATE_<FIELD>``
    (the judge's, the markers' and the passage store's are their models'), but for the input:
    ``--labels`` (required) and ``--review-records`` (repeatable) are flag only."""

    model_config = SettingsConfigDict(
        env_prefix="CITEMON_CALIBRATE_", extra="ignore", validate_default=True, frozen=True
    )
    TITLE: ClassVar[str] = "calibrate"
    FLAGS: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--labels",
            "labels",
            "JSONL file of human labels",
            Path,
            env=False,
            required=True,
            group=MAIN,
        ),
        Flag(
            "--review-records",
            "review_records",
            "review records (repeatable): --labels are production labels of these answers",
            Path,
            metavar="FILE",
            env=False,
            repeat=True,
            group=MAIN,
        ),
        Flag("--format", "format", "table (default) or json", choices=("table", "json")),
        Flag("--output", "output", "write the calibration file here", Path, metavar="OUTPUT"),
        Flag(
            "--partial",
            "partial",
            "how partial support (Partial, partially_supported) counts (default not_entailed)",
            choices=("entailed", "not_entailed", "exclude"),
        ),
        Flag("--limit", "limit", "use at most this many labelled pairs", int, metavar="LIMIT"),
        Flag(
            "--disagreements",
            "disagreements",
            "how many disagreements to show (default 10)",
            int,
            metavar="DISAGREEMENTS",
        ),
        Flag(
            "--no-threshold",
            "no_threshold",
            "write the judge's own verdicts' counts to --output, not the chosen threshold",
            bool,
        ),
    )

    labels: Path
    review_records: list[Path] = Field(default_factory=list)
    format: Literal["table", "json"] = "table"
    output: Path | None = None
    partial: Literal["entailed", "not_entailed", "exclude"] = "not_entailed"
    limit: int | None = None
    disagreements: int = 10
    no_threshold: bool = False

    @field_validator("output", "limit", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    CalibrateSettings.add_arguments(parser, title="calibrate")
    add_marker_arguments(parser)
    add_judge_arguments(parser)
    add_passage_store_arguments(parser)


def _fmt(value: float | None, ci: tuple[float, float] | None) -> str:
    if value is None:
        return "n/a"
    interval = f"  [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    return f"{value:.3f}{interval}"


def render_table(report: CalibrationReport) -> str:
    c = report.confusion
    lines = [
        f"judge {report.judge} · {report.data} · partial={report.partial}",
        f"pairs used {report.pairs}; skipped {sum(report.skipped.values())}",
        *(f"  skipped {n:>5}  {reason}" for reason, n in report.skipped.items()),
        "",
        "                    judge entailed   judge not",
        f"human entailed      {c.tp:>14}   {c.fn:>9}",
        f"human not entailed  {c.fp:>14}   {c.tn:>9}",
        "",
        "                     value  95% interval",
        f"sensitivity          {_fmt(report.sensitivity, report.sensitivity_ci95)}",
        f"specificity          {_fmt(report.specificity, report.specificity_ci95)}",
        f"balanced accuracy    {_fmt(report.balanced_accuracy, report.balanced_accuracy_ci95)}",
        f"Cohen's kappa        {_fmt(report.kappa, report.kappa_ci95)}",
    ]
    if report.confidence_means is None:
        lines.append("ROC AUC              n/a (the judge does not say what its confidence means)")
    else:
        lines.append(
            f"ROC AUC              {_fmt(report.roc_auc, report.roc_auc_ci95)}"
            f"  (P(entailed) of {report.scored_pairs} pairs)"
        )
    if report.threshold is not None and report.threshold_confusion is not None:
        t = report.threshold_confusion
        lines += [
            "",
            f"threshold maximising balanced accuracy: P(entailed) >= "
            f"{_fmt(report.threshold, report.threshold_ci95)}",
            f"  at it: sensitivity {_fmt(report.threshold_sensitivity, None)}, specificity "
            f"{_fmt(report.threshold_specificity, None)}, balanced accuracy "
            f"{_fmt(report.threshold_balanced_accuracy, None)} (in-sample: chosen on these "
            "pairs, so optimistic)",
            f"  judge entailed / not: human entailed {t.tp} / {t.fn}, "
            f"human not entailed {t.fp} / {t.tn}",
        ]
    lines.append(f"({report.intervals})")
    if report.disagreements:
        lines += ["", "worst disagreements (most confident wrong verdicts first):"]
        for d in report.disagreements:
            conf = f"{d.confidence:.2f}" if d.confidence is not None else "?"
            verdict = "entailed" if d.judge_entailed else "not entailed"
            lines += [
                f"- human {d.human_label}, judge {verdict} (confidence {conf}) · {d.source}",
                f"  claim:   {d.claim}",
                f"  passage: {d.passage_excerpt}",
            ]
    return "\n".join(lines)


async def _run(args: argparse.Namespace, own: CalibrateSettings) -> CalibrationReport:
    partial: PartialMapping = own.partial
    rows = read_label_rows(own.labels)
    await _fill_rows(args, rows)
    syntax = citation_syntax(args)
    pairs, skipped = pairs_from_rows(rows, partial=partial, limit=own.limit, syntax=syntax)
    judging = judge_options(args)
    judge = load_judge(judging.judge, judging)
    means = getattr(judge, "confidence_means", None)
    try:
        judged = await judge_pairs(judge, pairs, max_inflight=judging.max_inflight)
    finally:
        aclose = getattr(judge, "aclose", None)
        if aclose is not None:
            await aclose()
    return evaluate(
        judged,
        judge=judging.judge,
        data=f"{own.labels.name} ({len(rows)} rows)",
        partial=partial,
        skipped=skipped,
        max_disagreements=own.disagreements,
        confidence_means=means if isinstance(means, str) else None,
    )


async def _fill_rows(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """With --passage-store, the text of answer rows' passages that came without it, looked up
    in place, one lookup per answer (as ``score`` does); a passage still without text is
    skipped as before ("cited passage has no text"), never judged blind."""
    store = open_store(args)
    if store is None:
        return
    try:
        for row in rows:
            passages = row.get("passages")
            if not isinstance(passages, list):
                continue
            bare = [p for p in passages if isinstance(p, dict) and "id" in p and not p.get("text")]
            if not bare:
                continue
            found = await store.lookup(list(dict.fromkeys(str(p["id"]) for p in bare)))
            for p in bare:
                if str(p["id"]) in found:
                    p["text"] = found[str(p["id"])]
    except PassageLookupError as exc:
        raise ConfigError(f"cannot read the labelled answers' passages: {exc}") from None
    finally:
        await store.aclose()


def _check_args(args: argparse.Namespace, own: CalibrateSettings) -> None:
    """Fail before judging (minutes with an HTTP judge), not after it."""
    citation_syntax(args)  # a bad --marker-pattern
    if own.limit is not None and own.limit < 1:
        raise ConfigError(f"--limit must be at least 1, not {own.limit}")
    if own.disagreements < 0:
        raise ConfigError(f"--disagreements must be 0 or more, not {own.disagreements}")
    if own.output is not None and (own.output.is_dir() or not own.output.resolve().parent.is_dir()):
        raise ConfigError(f"--output {own.output}: not a file in an existing directory")


def _production(args: argparse.Namespace, own: CalibrateSettings) -> int:
    """Estimates from production labels of review records (nothing is judged)."""
    if own.limit is not None:
        raise ConfigError("--limit applies to benchmark labels, not to --review-records")
    labels = read_labels(own.labels)
    records = [r for path in own.review_records for r in read_review_records(path)]
    report = estimate(records, labels, partial=own.partial)
    calibration = None
    if own.output is not None:
        overall = report.groups[-1]
        confusion = Confusion(tp=overall.tp, fn=overall.fn, tn=overall.tn, fp=overall.fp)
        calibration = Calibration.from_confusion(
            confusion,
            judge=judge_options(args).judge,
            data=f"{own.labels.name} (production)",
            partial=own.partial,
        )
    _deliver(own, report, lambda: render_estimates(report), calibration)
    if not any(g.labelled_claims for g in report.groups):
        print("citemon: no label matches a cited claim of the review records", file=sys.stderr)
        return 1
    return 0


def _deliver(
    own: CalibrateSettings,
    report: BaseModel,
    render: Callable[[], str],
    calibration: Calibration | None,
    applied: str = "",
) -> None:
    """Write ``calibration`` to ``--output`` (when given) and print the report as ``--format``
    asks; both kinds of calibration (benchmark and production labels) end here."""
    if own.output is not None and calibration is not None:
        try:
            calibration.save(own.output)
        except OSError as exc:
            raise ConfigError(f"cannot write --output {own.output}: {exc.strerror}") from None
    if own.format == "json":
        print(json.dumps(report.model_dump(mode="json"), indent=2))
        return
    print(render())
    if own.output is not None:
        print(f"\ncalibration written to {own.output}{applied}")


def main(args: argparse.Namespace) -> int:
    own = CalibrateSettings.from_args(args)
    _check_args(args, own)
    if own.review_records:
        return _production(args, own)
    report = asyncio.run(_run(args, own))
    calibration = report.calibration(with_threshold=not own.no_threshold)
    applied = (
        f" with threshold {calibration.threshold:.3f} (score and run apply it)"
        if calibration.threshold is not None
        else ""
    )
    _deliver(own, report, lambda: render_table(report), calibration, applied)
    if report.pairs == 0:
        print("citemon: no usable labelled pairs", file=sys.stderr)
        return 1
    return 0
