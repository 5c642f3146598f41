"""The table ``citemon calibrate --labels L --review-records R`` prints
(:mod:`~citemon._review.estimates`)."""

from __future__ import annotations

from citemon._review.estimates import Estimate, Estimates, GroupEstimates

__all__ = ["render_estimates"]


def _fmt(e: Estimate | None) -> str:
    if e is None:
        return "n/a"
    return f"{e.value:.3f}  [{e.ci95[0]:.3f}, {e.ci95[1]:.3f}]  ({e.n} claims, {e.answers} answers)"


def _group(g: GroupEstimates) -> list[str]:
    name = (
        "all services and versions"
        if g.service is None and g.version is None
        else f"service {g.service or '-'} · version {g.version or '-'}"
    )
    lines = [
        name,
        f"  answers {g.answers} ({g.labelled_answers} labelled); labelled cited claims "
        f"{g.labelled_claims}; unlabelled cited claims {g.unlabelled_claims}",
        "  judge on this traffic (human entailed = positive):",
        f"    human entailed      judge correct {g.tp:>5}   judge failed {g.fn:>5}",
        f"    human not entailed  judge correct {g.fp:>5}   judge failed {g.tn:>5}",
        f"    sensitivity         {_fmt(g.sensitivity)}",
        f"    specificity         {_fmt(g.specificity)}",
        "  citation accuracy (share of cited claims a person finds supported):",
        "    citemon says        "
        + (f"{g.citemon_accuracy:.3f}" if g.citemon_accuracy is not None else "n/a"),
        f"    human labels only   {_fmt(g.human_accuracy)}",
        f"    PPI++               {_fmt(g.ppi_accuracy)}",
    ]
    if g.ppi_accuracy is not None and g.human_accuracy is not None:
        h = g.human_accuracy.ci95[1] - g.human_accuracy.ci95[0]
        p = g.ppi_accuracy.ci95[1] - g.ppi_accuracy.ci95[0]
        worth = f"{g.effective_labels:.0f}" if g.effective_labels is not None else "n/a"
        lines.append(
            f"    lambda {g.ppi_lambda:.3f}; interval width {p:.3f} vs {h:.3f} from labels "
            f"alone: worth {worth} labels ({g.labelled_claims} given)"
        )
    lines += [
        "  extractor (of labelled claims):",
        f"    not a claim         {_fmt(g.not_a_claim)}",
        f"    fused claims        {_fmt(g.fused)}",
        f"  failed citations, whose fault (of {g.failed_labelled} labelled claims citemon failed):",
        f"    pipeline (RAG)      {_fmt(g.pipeline_faults)}",
        f"    checker (citemon)   {_fmt(g.checker_faults)}",
    ]
    if g.checker_causes:
        causes = ", ".join(f"{k} {v}" for k, v in sorted(g.checker_causes.items()))
        lines.append(f"      checker causes: {causes}")
    return lines


def render_estimates(report: Estimates) -> str:
    lines = [
        f"{report.labels} labels · partial counts as {report.partial}",
        *(f"  skipped {n:>5}  {why}" for why, n in report.skipped.items()),
    ]
    for g in report.groups:
        lines += ["", *_group(g)]
    lines += ["", f"({report.intervals})"]
    return "\n".join(lines)
