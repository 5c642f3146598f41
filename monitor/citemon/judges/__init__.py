"""Judges: what decides whether passages entail a claim.

``--judge`` takes ``lexical`` (the offline default), ``learned`` (the offline trained judge),
``http`` (an OpenAI-compatible endpoint, wire contract v1, or v2 with ``--judge-protocol v2``),
``classifier`` (a sequence-pair classifier behind TEI's ``POST /predict``,
:mod:`citemon.judges.classifier`) or ``package.module:factory`` (a zero-argument callable
returning a :class:`Judge`).

``--judge-threshold`` (or the threshold a calibration file holds) decides a verdict from a
confidence: for ``classifier`` the entailment score; for any other judge whose
``confidence_means`` attribute says what its confidence is (``"entailed"``: P(entailed);
``"verdict"``: the probability of the verdict it gave, as ``learned``) it re-decides each
verdict through :class:`ThresholdJudge`. A judge that declares neither cannot take one.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Mapping
from typing import Any

from citemon.core.errors import ConfigError
from citemon.core.judge import Judge, JudgeObserver
from citemon.core.records import Verdict
from citemon.judges.settings import JudgeSettings

__all__ = [
    "Judge",
    "JudgeObserver",
    "JudgeSettings",
    "ThresholdJudge",
    "add_judge_arguments",
    "entailment_score",
    "judge_options",
    "load_judge",
]


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--judge*`` flags shared by ``score``, ``run``, ``selftest`` and ``calibrate``
    (:data:`~citemon.judges.settings.JUDGE_FLAGS`, each defaulting to its variable)."""
    JudgeSettings.add_arguments(parser, title="judge")


def judge_options(
    args: argparse.Namespace, *, calibrated_threshold: float | None = None
) -> JudgeSettings:
    """The judge flags; ``calibrated_threshold`` (a calibration file's) applies unless
    ``--judge-threshold`` was given."""
    return JudgeSettings.from_args(args).calibrated(calibrated_threshold)


def entailment_score(means: str | None, verdict: Verdict) -> float | None:
    """P(entailed) from a verdict, given what the judge says its confidence means (its
    ``confidence_means``); ``None`` when it says nothing or the verdict has no confidence."""
    if verdict.confidence is None:
        return None
    if means == "entailed":
        return verdict.confidence
    if means == "verdict":
        return verdict.confidence if verdict.entailed else 1.0 - verdict.confidence
    return None


class ThresholdJudge:
    """A judge whose verdicts are re-decided as ``P(entailed) >= threshold`` (P from its
    declared ``confidence_means``); a verdict without a confidence is kept as it is.

    Only ``entails`` is offered (batch methods would bypass the threshold), and ``confidence``
    becomes P(entailed), so ``confidence_means`` is ``"entailed"``.
    """

    confidence_means = "entailed"

    def __init__(self, judge: Judge, threshold: float) -> None:
        if getattr(judge, "confidence_means", None) not in ("entailed", "verdict"):
            raise ConfigError(
                f"{type(judge).__name__} does not say what its confidence means, so a "
                "threshold cannot be applied to it (--judge-threshold / --calibration)"
            )
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(f"--judge-threshold must be in [0, 1], not {threshold}")
        self.judge = judge
        self.threshold = threshold

    def __repr__(self) -> str:
        return f"ThresholdJudge({self.judge!r}, threshold={self.threshold:g})"

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        verdict = await self.judge.entails(claim, passages)
        p = entailment_score(getattr(self.judge, "confidence_means", None), verdict)
        if p is None:
            return verdict
        entailed = p >= self.threshold
        reason = f"{verdict.reason or 'P(entailed)'}; P {p:.3f} vs threshold {self.threshold:g}"
        return Verdict(entailed=entailed, reason=reason, confidence=p)

    async def aclose(self) -> None:
        aclose = getattr(self.judge, "aclose", None)
        if aclose is not None:
            await aclose()


def load_judge(
    spec: str, options: JudgeSettings | None = None, *, observer: JudgeObserver | None = None
) -> Judge:
    """Build the judge named by ``spec`` with ``options`` (checked by the model); raises
    :class:`ConfigError` with the reason."""
    options = options or JudgeSettings()
    judge = _load(spec, options, observer)
    if options.threshold is None or spec == "classifier":
        return judge
    return ThresholdJudge(judge, options.threshold)


def _load(spec: str, options: JudgeSettings, observer: JudgeObserver | None) -> Judge:
    if spec == "lexical":
        from citemon.judges.lexical import LexicalJudge

        return LexicalJudge()
    if spec == "learned":
        from citemon.judges.learned import LearnedJudge  # type: ignore[import-not-found,unused-ignore]

        judge: Any = LearnedJudge()
        return judge  # type: ignore[no-any-return]
    if spec == "http":
        from citemon.judges.http import HTTPBatchJudge, HTTPJudge

        kind = HTTPBatchJudge if options.protocol == "v2" else HTTPJudge
        return kind(
            options.base_url,
            options.model,
            max_inflight=options.concurrency,
            timeout_s=options.timeout,
            retries=options.retries,
            reply_format="minicheck" if options.format == "minicheck" else "json",
            observer=observer,
        )
    if spec == "classifier":
        from citemon.judges.classifier import DEFAULT_THRESHOLD, ClassifierJudge

        threshold = DEFAULT_THRESHOLD if options.threshold is None else options.threshold
        return ClassifierJudge(
            options.base_url,
            label=options.label,
            threshold=threshold,
            batch_pairs=options.batch_pairs,
            window_words=options.window_words,
            overlap_words=options.overlap_words,
            model=options.model,
            max_inflight=options.concurrency,
            timeout_s=options.timeout,
            retries=options.retries,
            observer=observer,
        )
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(
            f"unknown judge {spec!r}: use lexical, learned, http, classifier or module:factory"
        )
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load judge factory {spec!r}: {exc}") from exc
    made = factory()
    if not isinstance(made, Judge):
        raise ConfigError(f"{spec!r} returned {type(made).__name__}, which has no async entails()")
    return made
