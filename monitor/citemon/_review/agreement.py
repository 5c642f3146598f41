"""How far two reviewers agree on one set: Cohen's κ, overall and per label, and their confusion.

Cohen (1960): κ = (p_o − p_e) / (1 − p_e), p_o the share of claims both reviewers gave the same
label, p_e the share expected by chance from each reviewer's own label frequencies. Per label, κ
of the two reviewers' yes/no answers to "is it this label?" (one label against the rest), so a
team sees which label people cannot agree on. κ is undefined (``None``) when p_e = 1 (both
reviewers gave one and the same label to everything).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from citemon._core.errors import InputError
from citemon._core.stats import cohen_kappa
from citemon._review.model import LABELS, Label, LabelName

__all__ = ["Agreement", "agreement", "render_agreement"]


@dataclass(frozen=True, slots=True)
class Agreement:
    """Two reviewers on the claims both labelled."""

    reviewers: tuple[str, str]
    claims: int
    """Claims both reviewers labelled (the pairs κ is computed on)."""
    only: tuple[int, int]
    """Claims only the first / only the second reviewer labelled (not in κ)."""
    observed: float | None
    kappa: float | None
    kappa_per_label: dict[LabelName, float | None]
    confusion: dict[LabelName, dict[LabelName, int]]
    """``confusion[first's label][second's label]`` = claims."""

    def to_json(self) -> dict[str, object]:
        return {
            "reviewers": list(self.reviewers),
            "claims": self.claims,
            "only": list(self.only),
            "observed_agreement": self.observed,
            "kappa": self.kappa,
            "kappa_per_label": dict(self.kappa_per_label),
            "confusion": {row: dict(cols) for row, cols in self.confusion.items()},
        }


def agreement(labels: Sequence[Label], reviewers: Sequence[str] | None = None) -> Agreement:
    """κ between two reviewers' labels (the latest of each reviewer per claim, as
    :func:`~citemon._review.model.read_labels` gives them). ``reviewers`` names the two; without
    it the labels must come from exactly two."""
    present = list(dict.fromkeys(label.reviewer for label in labels))
    if reviewers is None:
        if len(present) != 2:
            raise InputError(
                f"agreement needs the labels of exactly two reviewers, found {len(present)}"
                + (f" ({', '.join(present)}); name two with --reviewers" if present else "")
            )
        first, second = present
    else:
        if len(reviewers) != 2 or reviewers[0] == reviewers[1]:
            raise InputError("name two different reviewers")
        first, second = reviewers
        missing = [r for r in (first, second) if r not in present]
        if missing:
            raise InputError(f"no labels from {', '.join(missing)}")
    by_first = {label.key: label.label for label in labels if label.reviewer == first}
    by_second = {label.key: label.label for label in labels if label.reviewer == second}
    both = [key for key in by_first if key in by_second]
    a = [by_first[key] for key in both]
    b = [by_second[key] for key in both]
    confusion: dict[LabelName, dict[LabelName, int]] = {
        row: dict.fromkeys(LABELS, 0) for row in LABELS
    }
    for x, y in zip(a, b, strict=True):
        confusion[x][y] += 1
    per_label: dict[LabelName, float | None] = {
        name: _kappa([x == name for x in a], [y == name for y in b]) for name in LABELS
    }
    return Agreement(
        reviewers=(first, second),
        claims=len(both),
        only=(len(by_first) - len(both), len(by_second) - len(both)),
        observed=(sum(x == y for x, y in zip(a, b, strict=True)) / len(both)) if both else None,
        kappa=_kappa(a, b),
        kappa_per_label=per_label,
        confusion=confusion,
    )


def _k(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def render_agreement(result: Agreement) -> str:
    first, second = result.reviewers
    width = max(len(name) for name in LABELS) + 2
    lines = [
        f"reviewers {first} and {second}: {result.claims} claims labelled by both"
        f" (only {first}: {result.only[0]}, only {second}: {result.only[1]})",
        f"observed agreement {_k(result.observed)}   Cohen's kappa {_k(result.kappa)}",
        "",
        "kappa per label (that label against the rest)",
        *(f"  {name:<{width}}{_k(k)}" for name, k in result.kappa_per_label.items()),
        "",
        f"rows: {first} · columns: {second}",
        " " * (width + 2) + "".join(f"{name:>{width}}" for name in LABELS),
        *(
            f"  {row:<{width}}"
            + "".join(f"{result.confusion[row][col]:>{width}}" for col in LABELS)
            for row in LABELS
        ),
    ]
    return "\n".join(lines)


def _kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float | None:
    """κ of two reviewers' labels of the same claims, in the same order."""
    return cohen_kappa(Counter(zip(a, b, strict=True)))
