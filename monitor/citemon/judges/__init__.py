"""Judges: what decides whether passages entail a claim. This package is the public judge API.

A custom judge imports what it implements and returns from here (``from citemon.judges import
Judge, Verdict``; a batch judge also ``BatchJudge``, ``CitedVerdict``, ``SupportVerdict``), and
raises a :class:`JudgeError` when it cannot answer (the claim is then ``unjudged``, never
"wrong"). The protocols are defined in the bottom layer (:mod:`citemon._core.judge`) so that the
scorer needs no judge module; they are re-exported here, with the built-in judges, the one HTTP
transport a judge of a new wire can be built on, and :func:`load_judge` (what ``--judge`` calls).
``docs/judges.md`` documents them.

``--judge-threshold`` (or the threshold a calibration file holds) decides a verdict from a
confidence: for ``classifier`` the entailment score; for any other judge whose
``confidence_means`` attribute says what its confidence is (``"entailed"``: P(entailed);
``"verdict"``: the probability of the verdict it gave, as ``learned``) it re-decides each
verdict through :class:`ThresholdJudge`. A judge that declares neither cannot take one.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from citemon._core.errors import (
    ConfigError,
    JudgeError,
    JudgeHTTPError,
    JudgeInvalidReply,
    JudgeRateLimited,
    JudgeTimeout,
)
from citemon._core.judge import (
    BatchJudge,
    CitedOutcome,
    CitedVerdict,
    CPUJudge,
    Judge,
    JudgeObserver,
    SupportOutcome,
    SupportVerdict,
)
from citemon._core.records import Verdict
from citemon.judges.settings import JudgeSettings

if TYPE_CHECKING:  # imported when first used (below): `--judge lexical` loads no HTTP client
    from citemon.judges.cache import ReplyCache
    from citemon.judges.classifier import ClassifierJudge
    from citemon.judges.http import HTTPBatchJudge, HTTPJudge
    from citemon.judges.learned import LearnedJudge
    from citemon.judges.lexical import LexicalJudge
    from citemon.judges.transport import Exchange, HTTPTransport, Refused, Site, Wire

__all__ = [
    "BatchJudge",
    "CPUJudge",
    "CitedOutcome",
    "CitedVerdict",
    "ClassifierJudge",
    "Exchange",
    "HTTPBatchJudge",
    "HTTPJudge",
    "HTTPTransport",
    "Judge",
    "JudgeError",
    "JudgeHTTPError",
    "JudgeInvalidReply",
    "JudgeObserver",
    "JudgeRateLimited",
    "JudgeSettings",
    "JudgeTimeout",
    "LearnedJudge",
    "LexicalJudge",
    "Refused",
    "ReplyCache",
    "Site",
    "SupportOutcome",
    "SupportVerdict",
    "ThresholdJudge",
    "Verdict",
    "Wire",
    "add_judge_arguments",
    "entailment_score",
    "judge_options",
    "load_judge",
]

_LAZY = {
    "ClassifierJudge": "citemon.judges.classifier",
    "Exchange": "citemon.judges.transport",
    "HTTPBatchJudge": "citemon.judges.http",
    "HTTPJudge": "citemon.judges.http",
    "HTTPTransport": "citemon.judges.transport",
    "LearnedJudge": "citemon.judges.learned",
    "LexicalJudge": "citemon.judges.lexical",
    "Refused": "citemon.judges.transport",
    "ReplyCache": "citemon.judges.cache",
    "Site": "citemon.judges.transport",
    "Wire": "citemon.judges.transport",
}


def __getattr__(name: str) -> Any:
    """The built-in judges and the HTTP transport, imported on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


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
    spec: str,
    options: JudgeSettings | None = None,
    *,
    observers: Sequence[JudgeObserver] = (),
) -> Judge:
    """Build the judge named by ``spec`` with ``options`` (checked by the model), its transport
    telling each of ``observers`` of every request; raises :class:`ConfigError` with the
    reason."""
    options = options or JudgeSettings()
    judge = _load(spec, options, observers)
    if options.threshold is None or spec == "classifier":
        return judge
    return ThresholdJudge(judge, options.threshold)


def _transport(options: JudgeSettings, observers: Sequence[JudgeObserver]) -> HTTPTransport:
    """The HTTP judges' transport, from the settings: the endpoint, its limits and the API key
    (the settings' secret, read once by the settings model; the transport reads no
    environment)."""
    from citemon.judges.transport import HTTPTransport

    return HTTPTransport(
        options.base_url,
        options.model,
        max_inflight=options.max_inflight,
        timeout_s=options.timeout_s,
        retries=options.retries,
        api_key=options.secret_api_key(),
        observers=observers,
    )


def _load(spec: str, options: JudgeSettings, observers: Sequence[JudgeObserver]) -> Judge:
    if spec == "lexical":
        from citemon.judges.lexical import LexicalJudge

        return LexicalJudge()
    if spec == "learned":
        from citemon.judges.learned import LearnedJudge

        return LearnedJudge()
    if spec == "http":
        from citemon.judges.http import HTTPBatchJudge, HTTPJudge

        if options.protocol == "v2":
            if options.format != "json":
                raise ConfigError(
                    "--judge-format minicheck asks one claim per request: use --judge-protocol v1"
                )
            return HTTPBatchJudge(_transport(options, observers))
        minicheck = options.format == "minicheck"
        transport = _transport(options, observers)
        return HTTPJudge(transport, reply_format="minicheck" if minicheck else "json")
    if spec == "classifier":
        from citemon.judges.classifier import DEFAULT_THRESHOLD, ClassifierJudge

        threshold = DEFAULT_THRESHOLD if options.threshold is None else options.threshold
        return ClassifierJudge(
            _transport(options, observers),
            label=options.label,
            threshold=threshold,
            batch_pairs=options.batch_pairs,
            window_words=options.window_words,
            overlap_words=options.overlap_words,
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
