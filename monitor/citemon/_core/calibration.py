"""The calibration file and the correction it allows: a judge's measured error, applied.

:class:`Calibration` is the file ``citemon calibrate --output`` writes and ``--calibration``
reads (measured by :mod:`citemon._checks.calibration`); :func:`corrected_accuracy` applies the
Rogan–Gladen correction with it. When a threshold was chosen, the file holds it and the counts
*at* it, since ``score`` and ``run`` apply it: the correction then uses the error of the rule that
produced the verdicts.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from citemon._core.errors import ConfigError
from citemon._core.stats import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    jeffreys_draw,
    percentile_interval,
    ratio,
)
from citemon._core.tally import Tally

__all__ = [
    "MIN_INFORMATIVENESS",
    "Calibration",
    "Confusion",
    "balanced_accuracy",
    "corrected_accuracy",
]

MIN_INFORMATIVENESS = 0.05
"""Below this Youden index (sensitivity + specificity − 1) the judge barely separates entailed
from non-entailed pairs, and a Rogan–Gladen correction would divide by almost nothing."""


class Confusion(BaseModel):
    """Judge verdicts against human labels; "positive" means *entailed*."""

    model_config = ConfigDict(frozen=True)

    tp: int = 0  # human entailed, judge entailed
    fn: int = 0  # human entailed, judge not
    tn: int = 0  # human not, judge not
    fp: int = 0  # human not, judge entailed

    @property
    def n(self) -> int:
        return self.tp + self.fn + self.tn + self.fp

    @property
    def sensitivity(self) -> float | None:
        return ratio(self.tp, self.tp + self.fn)

    @property
    def specificity(self) -> float | None:
        return ratio(self.tn, self.tn + self.fp)

    @property
    def balanced_accuracy(self) -> float | None:
        sens, spec = self.sensitivity, self.specificity
        return None if sens is None or spec is None else (sens + spec) / 2

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[bool, bool]]) -> Confusion:
        """From (human entailed, judge entailed) pairs."""
        c: Counter[tuple[bool, bool]] = Counter(pairs)
        return cls(tp=c[True, True], fn=c[True, False], tn=c[False, False], fp=c[False, True])


def balanced_accuracy(truth: Sequence[bool], predicted: Sequence[bool]) -> float | None:
    """(sensitivity + specificity) / 2 of ``predicted`` against ``truth``; ``None`` unless both
    classes occur in ``truth``: with one class missing, its rate is undefined, and counting it
    as 0 (as a second copy of this function once did) would halve a perfect score."""
    return Confusion.from_pairs(zip(truth, predicted, strict=True)).balanced_accuracy


class Calibration(BaseModel):
    """A judge's measured error: what ``--calibration FILE`` reads.

    The counts are kept (not only the rates) so that the corrected estimate's interval can carry
    the calibration's own sampling uncertainty.
    """

    model_config = ConfigDict(extra="ignore")

    format: int = 1
    judge: str
    tp: int
    fn: int
    tn: int
    fp: int
    sensitivity: float | None = None
    specificity: float | None = None
    created: str = ""
    data: str = ""
    partial: str = "not_entailed"
    threshold: float | None = None
    """Entailed iff P(entailed) >= this; the counts above were measured with it applied."""
    threshold_ci95: tuple[float, float] | None = None
    roc_auc: float | None = None
    roc_auc_ci95: tuple[float, float] | None = None

    def threshold_for(self, judge: str) -> float | None:
        """The threshold to apply to ``judge``: this file's, if it measured that judge."""
        return self.threshold if self.judge == judge else None

    @classmethod
    def from_confusion(cls, c: Confusion, *, judge: str, data: str, partial: str) -> Calibration:
        return cls(
            judge=judge,
            tp=c.tp,
            fn=c.fn,
            tn=c.tn,
            fp=c.fp,
            sensitivity=c.sensitivity,
            specificity=c.specificity,
            created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            data=data,
            partial=partial,
        )

    @property
    def confusion(self) -> Confusion:
        return Confusion(tp=self.tp, fn=self.fn, tn=self.tn, fp=self.fp)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a calibration file; :class:`ConfigError` with the reason when it is unusable."""
        try:
            calib = cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValidationError) as exc:
            raise ConfigError(f"cannot read calibration file {path}: {exc}") from exc
        if calib.format != 1:
            raise ConfigError(f"calibration file {path}: unknown format {calib.format}")
        return calib


def _rogan_gladen(p_obs: float, sens: float, spec: float) -> float:
    return min(1.0, max(0.0, (p_obs + spec - 1.0) / (sens + spec - 1.0)))


def corrected_accuracy(
    correct: int,
    cited: int,
    calib: Calibration,
    *,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, tuple[float, float]] | None:
    """Citation accuracy corrected for the judge's error (Rogan–Gladen), with a 95% interval.

    ``correct`` of ``cited`` claims were judged correct. The true share π satisfies
    ``p_obs = sens·π + (1 − spec)·(1 − π)``, so ``π = (p_obs + spec − 1) / (sens + spec − 1)``,
    clipped to [0, 1]. The interval draws ``p_obs``, ``sens`` and ``spec`` from their Jeffreys
    posteriors (the observed counts and the calibration counts) and takes percentiles, so it
    widens with a small calibration set as well as with few cited claims. A draw in which the
    judge is uninformative (``sens + spec − 1 ≤ 0``) says nothing about π and is counted as 0
    and 1 alternately, widening the interval honestly.

    Returns ``None`` when there is nothing to correct (``cited == 0``), when the calibration
    lacks either class, or when the judge is uninformative (``sens + spec − 1 ≤``
    :data:`MIN_INFORMATIVENESS`): then no correction is trustworthy and none is reported.
    """
    c = calib.confusion
    pos, neg = c.tp + c.fn, c.tn + c.fp
    sens, spec = c.sensitivity, c.specificity
    observed = Tally(cited=max(cited, 0), correct=correct).citation_accuracy
    if observed is None or sens is None or spec is None:
        return None
    if sens + spec - 1.0 <= MIN_INFORMATIVENESS:
        return None
    point = _rogan_gladen(observed, sens, spec)
    rng = random.Random(seed)
    values = []
    flip = False
    for _ in range(draws):
        p = jeffreys_draw(rng, correct, cited)
        se = jeffreys_draw(rng, c.tp, pos)
        sp = jeffreys_draw(rng, c.tn, neg)
        if se + sp - 1.0 <= 0.0:
            values.append(1.0 if flip else 0.0)
            flip = not flip
        else:
            values.append(_rogan_gladen(p, se, sp))
    return point, percentile_interval(values)
