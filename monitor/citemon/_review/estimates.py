"""What people's labels of a review sample say about the traffic and about citemon.

Inputs: the review records of a uniform sample of answers (``--review-rate``; the *pool*) and
labels of some of those answers (a review set pulled from the pool at random). Per service and
version (and over everything), :func:`estimate` reports:

* **the judge on this traffic**: sensitivity and specificity, a person's ``entailed`` being
  the positive class and citemon's ``correct`` the judge's positive verdict;
* **citation accuracy**, the share of the claims citemon counts (cited, judged) whose cited
  passages a person says support them: from the labels alone, and by PPI++
  (:mod:`citemon._review.ppi`: every verdict in the pool, rectified by the labelled claims), each
  with a 95% interval clustered by answer, and how many labels the PPI++ estimate is worth;
* **the extractor's error rate**: of the labelled claims, the share a person says is not one
  claim (``not_a_claim``) or fuses two (checker cause ``fused``);
* **which story a failure tells**: of the labelled claims citemon failed, the share that are
  *pipeline faults* (a person agrees the citations do not support the claim: the RAG service's
  to fix) and *checker faults* (a person says the claim is supported, is not one claim, or
  names a checker cause: ``overlap``, ``fused``, ``strict``; citemon's), with intervals.

How labels count: ``entailed`` is supported; ``not_entailed`` is not; ``partial`` is not by
default (``correct`` needs full support), or supported, or left out (``partial``);
``not_a_claim`` is not supported in the accuracy (the unit citemon counts was not a
supported claim) and is left out of sensitivity and specificity (there is no truth about a
non-claim's support). With several reviewers on one claim, the first label in the file counts
(agreement between reviewers is reported elsewhere).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from citemon._core.records import CITED_VERDICTS
from citemon._core.tally import Tally
from citemon._review.model import Label, ReviewRecord
from citemon._review.ppi import MeanEstimate, clustered_mean, clustered_ratio, ppi_mean

__all__ = ["Estimate", "Estimates", "GroupEstimates", "PartialCounts", "estimate"]

PartialCounts = Literal["entailed", "not_entailed", "exclude"]

CHECKER_FAULT_CAUSES: tuple[str, ...] = ("overlap", "fused", "strict")


class Estimate(BaseModel):
    """A proportion with its 95% interval (clustered by answer)."""

    value: float
    ci95: tuple[float, float]
    n: int
    """Claims behind it."""
    answers: int

    @classmethod
    def of(cls, m: MeanEstimate | None) -> Estimate | None:
        if m is None:
            return None
        return cls(value=m.estimate, ci95=m.ci, n=m.n, answers=m.clusters)


class GroupEstimates(BaseModel):
    service: str | None
    version: str | None
    answers: int
    """Answers in the pool (review records)."""
    labelled_answers: int
    labelled_claims: int
    """Labelled cited, judged claims used for the accuracy estimates."""
    unlabelled_claims: int
    """Cited, judged claims of answers without labels (PPI++'s unlabelled verdicts)."""
    tp: int
    fn: int
    fp: int
    tn: int
    sensitivity: Estimate | None = None
    specificity: Estimate | None = None
    citemon_accuracy: float | None = None
    """citemon's own citation accuracy over the pool (share ``correct`` of cited judged)."""
    human_accuracy: Estimate | None = None
    ppi_accuracy: Estimate | None = None
    ppi_lambda: float | None = None
    effective_labels: float | None = None
    not_a_claim: Estimate | None = None
    fused: Estimate | None = None
    failed_labelled: int = 0
    """Labelled claims citemon failed: the denominator of the fault split."""
    pipeline_faults: Estimate | None = None
    checker_faults: Estimate | None = None
    checker_causes: dict[str, int] = {}
    """Checker faults by cause: overlap, fused, strict, not_a_claim, supported (the person
    found the claim supported and named no checker cause)."""


class Estimates(BaseModel):
    partial: str
    labels: int
    skipped: dict[str, int]
    groups: list[GroupEstimates]
    intervals: str = (
        "95% normal intervals, clustered by answer (claims of one answer are not independent); "
        "PPI++ after Angelopoulos, Duchi & Zrnic 2023, lambda tuned for the clustered variance"
    )


@dataclass
class _Claim:
    answer: str
    verdict: str
    label: Label | None


@dataclass
class _Group:
    answers: list[ReviewRecord] = field(default_factory=list)
    claims: list[_Claim] = field(default_factory=list)


def _supported(label: Label, partial: PartialCounts) -> float | None:
    if label.label == "entailed":
        return 1.0
    if label.label == "partial":
        return {"entailed": 1.0, "not_entailed": 0.0, "exclude": None}[partial]
    return 0.0


def _checker_cause(label: Label, partial: PartialCounts) -> str | None:
    """Why a claim citemon failed is the checker's fault, or ``None`` (a pipeline fault)."""
    if label.checker in CHECKER_FAULT_CAUSES:
        return label.checker
    if label.label == "not_a_claim":
        return "not_a_claim"
    if _supported(label, partial) == 1.0:
        return "supported"
    return None


def _group(
    key: tuple[str | None, str | None], group: _Group, partial: PartialCounts
) -> GroupEstimates:
    labelled_answers = {c.answer for c in group.claims if c.label is not None}
    cited = [c for c in group.claims if c.verdict in CITED_VERDICTS]
    y: list[float] = []
    f: list[float] = []
    ids: list[str] = []
    sens_pairs: list[tuple[str, float, float]] = []
    for c in cited:
        if c.label is None:
            continue
        supported = _supported(c.label, partial)
        if supported is None:
            continue
        verdict = 1.0 if c.verdict == "correct" else 0.0
        y.append(supported)
        f.append(verdict)
        ids.append(c.answer)
        if c.label.label != "not_a_claim":
            sens_pairs.append((c.answer, supported, verdict))
    unlabelled = [c for c in cited if c.answer not in labelled_answers]
    f_u = [1.0 if c.verdict == "correct" else 0.0 for c in unlabelled]
    ppi = ppi_mean(y, f, f_u, clusters=ids, clusters_unlabelled=[c.answer for c in unlabelled])
    counts = Counter((int(t), int(p)) for _, t, p in sens_pairs)
    out = GroupEstimates(
        service=key[0],
        version=key[1],
        answers=len(group.answers),
        labelled_answers=len(labelled_answers),
        labelled_claims=len(y),
        unlabelled_claims=len(f_u),
        tp=counts[(1, 1)],
        fn=counts[(1, 0)],
        fp=counts[(0, 1)],
        tn=counts[(0, 0)],
        sensitivity=Estimate.of(_conditional(sens_pairs, positive=True)),
        specificity=Estimate.of(_conditional(sens_pairs, positive=False)),
        citemon_accuracy=_tally(cited).citation_accuracy,
    )
    if ppi is not None:
        out.human_accuracy = Estimate.of(ppi.human)
        out.ppi_accuracy = Estimate.of(ppi.ppi)
        out.ppi_lambda = ppi.lam
        out.effective_labels = ppi.effective_labels
    labelled = [c for c in group.claims if c.label is not None]
    if labelled:
        answers = [c.answer for c in labelled]
        out.not_a_claim = Estimate.of(
            clustered_mean(
                [float(c.label.label == "not_a_claim") for c in labelled if c.label], answers
            )
        )
        out.fused = Estimate.of(
            clustered_mean(
                [float(c.label.checker == "fused") for c in labelled if c.label], answers
            )
        )
    failed = [c for c in cited if c.label is not None and c.verdict != "correct"]
    if failed:
        causes = [_checker_cause(c.label, partial) for c in failed if c.label]
        answers = [c.answer for c in failed]
        out.failed_labelled = len(failed)
        out.pipeline_faults = Estimate.of(
            clustered_mean([float(cause is None) for cause in causes], answers)
        )
        out.checker_faults = Estimate.of(
            clustered_mean([float(cause is not None) for cause in causes], answers)
        )
        out.checker_causes = dict(Counter(cause for cause in causes if cause is not None))
    return out


def _tally(claims: Iterable[_Claim]) -> Tally:
    tally = Tally()
    for claim in claims:
        tally.add_verdict(claim.verdict)
    return tally


def _conditional(
    pairs: Sequence[tuple[str, float, float]], *, positive: bool
) -> MeanEstimate | None:
    """Sensitivity (``positive``) or specificity as a ratio of per-answer sums."""
    num: dict[str, float] = {}
    den: dict[str, float] = {}
    for answer, truth, verdict in pairs:
        if (truth == 1.0) != positive:
            continue
        den[answer] = den.get(answer, 0.0) + 1.0
        num[answer] = num.get(answer, 0.0) + float(verdict == truth)
    return clustered_ratio([num[a] for a in den], [den[a] for a in den])


def estimate(
    records: Iterable[ReviewRecord],
    labels: Iterable[Label],
    *,
    partial: PartialCounts = "not_entailed",
) -> Estimates:
    """The estimates per (service, version) and over all (service and version ``None``)."""
    first: dict[tuple[str, int], Label] = {}
    n_labels = 0
    for given in labels:
        n_labels += 1
        first.setdefault(given.key, given)
    groups: dict[tuple[str | None, str | None], _Group] = {}
    everything = _Group()
    seen: set[tuple[str, int]] = set()
    answers_seen: set[str] = set()
    skipped: Counter[str] = Counter()
    for record in records:
        if record.trace_id in answers_seen:
            skipped["duplicate review record"] += 1
            continue
        answers_seen.add(record.trace_id)
        group = groups.setdefault((record.service, record.version), _Group())
        for target in (group, everything):
            target.answers.append(record)
        for claim in record.claims:
            label = first.get((record.trace_id, claim.claim))
            if label is not None:
                seen.add(label.key)
            item = _Claim(record.trace_id, claim.verdict, label)
            group.claims.append(item)
            everything.claims.append(item)
    missing = len(set(first) - seen)
    if missing:
        skipped["label of a claim in no review record"] = missing
    if n_labels > len(first):
        skipped["further label of an already labelled claim"] = n_labels - len(first)
    out = [_group(key, groups[key], partial) for key in sorted(groups, key=_sort_key)]
    if len(groups) > 1:
        out.append(_group((None, None), everything, partial))
    return Estimates(partial=partial, labels=n_labels, skipped=dict(skipped), groups=out)


def _sort_key(key: tuple[str | None, str | None]) -> tuple[str, str]:
    return (key[0] or "", key[1] or "")
