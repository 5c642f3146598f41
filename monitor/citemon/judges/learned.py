"""The ``learned`` judge: a small logistic model over claim–passage alignment features.

Offline, no network, no numpy: the weights (a few dozen numbers and a capped IDF table) ship as
``monitor/citemon/data/learned_judge.json``, written by ``scripts/train_judge.py`` from
human-labelled development data (WiCE and ExpertQA, not shipped with the repository: the
script reads the folder ``--data`` or ``CITEMON_LABELLED_DATA`` names). The file also records
how well the model did under grouped cross-validation, so ``citemon calibrate`` output can be
compared with what the model promised on its own development data.

It is an instrument with a measured error, not an oracle: lexical alignment cannot see
paraphrase or world knowledge. Calibrate it on your own labels (``citemon calibrate``) and use
the calibration file for corrected estimates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from citemon._core.errors import ConfigError
from citemon._core.records import Verdict
from citemon.judges.features import FEATURE_NAMES, extract

__all__ = ["WEIGHTS_RESOURCE", "LearnedJudge", "LearnedModel", "load_model"]

WEIGHTS_RESOURCE = "learned_judge.json"
"""File name of the shipped weights inside the ``citemon.data`` package directory."""


def sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@dataclass
class LearnedModel:
    """A logistic model over standardised :data:`~citemon.judges.features.FEATURE_NAMES`."""

    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    idf: dict[str, float] = field(default_factory=dict)
    default_idf: float = 1.0
    threshold: float = 0.5
    meta: dict[str, Any] = field(default_factory=dict)

    def features(self, claim: str, passages: Mapping[str, str] | Sequence[str]) -> list[float]:
        return extract(claim, passages, self.idf, default_idf=self.default_idf)

    def probability(self, x: Sequence[float]) -> float:
        """P(entailed) for a feature vector."""
        z = self.intercept
        for c, v, m, s in zip(self.coef, x, self.mean, self.scale, strict=True):
            z += c * (v - m) / s
        return sigmoid(z)

    def to_json(self) -> dict[str, Any]:
        """The weights file's content; features by name so a reordering cannot go unnoticed."""
        return {
            "format": 1,
            "features": list(FEATURE_NAMES),
            "mean": [round(v, 6) for v in self.mean],
            "scale": [round(v, 6) for v in self.scale],
            "coef": [round(v, 6) for v in self.coef],
            "intercept": round(self.intercept, 6),
            "threshold": self.threshold,
            "default_idf": self.default_idf,
            "meta": self.meta,
            "idf": self.idf,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LearnedModel:
        if data.get("format") != 1:
            raise ConfigError(f"learned judge weights: unknown format {data.get('format')!r}")
        if list(data["features"]) != list(FEATURE_NAMES):
            raise ConfigError(
                "learned judge weights were trained on different features "
                f"({len(data['features'])} vs {len(FEATURE_NAMES)}): retrain with "
                "scripts/train_judge.py"
            )
        return cls(
            mean=[float(v) for v in data["mean"]],
            scale=[float(v) for v in data["scale"]],
            coef=[float(v) for v in data["coef"]],
            intercept=float(data["intercept"]),
            idf={str(k): float(v) for k, v in data["idf"].items()},
            default_idf=float(data["default_idf"]),
            threshold=float(data.get("threshold", 0.5)),
            meta=dict(data.get("meta") or {}),
        )


def load_model(path: str | Path | None = None) -> LearnedModel:
    """Load weights from ``path``, or the shipped ones (via :mod:`importlib.resources`)."""
    try:
        if path is None:
            text = resources.files("citemon.data").joinpath(WEIGHTS_RESOURCE).read_text("utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        return LearnedModel.from_json(json.loads(text))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        where = path or "shipped"
        raise ConfigError(f"cannot load learned judge weights ({where}): {exc}") from exc


class LearnedJudge:
    """Implements :class:`~citemon._core.judge.Judge` with :class:`LearnedModel`.

    ``confidence`` is the model's probability for the verdict it gave (0.5–1.0). Scoring is
    CPU-bound and fast (about a millisecond for a short passage, tens for a 100 kB page); the
    monitor's scorer runs :meth:`check` in its worker pool so that a long answer does not hold
    the event loop.
    """

    confidence_means = "verdict"
    """For ``citemon calibrate`` and ``--judge-threshold``: P(entailed) is ``confidence`` for an
    entailed verdict and ``1 - confidence`` otherwise."""

    def __init__(self, model: LearnedModel | None = None, *, threshold: float | None = None):
        self.model = model if model is not None else load_model()
        self.threshold = self.model.threshold if threshold is None else threshold

    def __repr__(self) -> str:
        return f"LearnedJudge(threshold={self.threshold})"

    def probability(self, claim: str, passages: Mapping[str, str]) -> float:
        return self.model.probability(self.model.features(claim, passages))

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        return self.check(claim, passages)

    def check(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        """The verdict, synchronously (:class:`~citemon._core.judge.CPUJudge`)."""
        if not any(t.strip() for t in passages.values()):
            # Empty text entails nothing; say so rather than let a feature of nothing decide.
            return Verdict(entailed=False, confidence=1.0, reason="learned: no passage text")
        p = self.probability(claim, passages)
        entailed = p >= self.threshold
        return Verdict(
            entailed=entailed,
            confidence=round(p if entailed else 1.0 - p, 4),
            reason=f"learned: p(entailed)={p:.2f}",
        )
