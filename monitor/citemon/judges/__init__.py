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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from citemon.core.errors import ConfigError
from citemon.core.judge import Judge, JudgeObserver
from citemon.core.records import Verdict
from citemon.judges.settings import JudgeEnvironment

__all__ = [
    "Judge",
    "JudgeObserver",
    "JudgeOptions",
    "ThresholdJudge",
    "add_judge_arguments",
    "entailment_score",
    "judge_options",
    "load_judge",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class JudgeOptions:
    """Options of the ``http`` and ``classifier`` judges; the others ignore them (but
    ``threshold``, which any judge with a declared ``confidence_means`` takes)."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "judge"
    concurrency: int = 8
    timeout_s: float = 30.0
    retries: int = 3
    protocol: str = "v1"
    # -- classifier (and threshold) ------------------------------------------------------
    label: str = "entailment"
    threshold: float | None = None
    """None: the judge's own rule (the classifier's 0.5)."""
    batch_pairs: int = 32
    window_words: int = 300
    overlap_words: int = 50
    format: str = "json"


_DEFAULTS = JudgeOptions()


def _number(kind: type[int] | type[float], env_var: str) -> Callable[[str], int | float]:
    """An argparse ``type`` whose error names the env var too: argparse also converts a string
    default, so a bad ``CITEMON_JUDGE_*`` value is a usage error (exit 2), not a traceback."""

    def convert(value: str) -> int | float:
        try:
            return kind(value)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(
                f"{value!r} is not {what} (from the flag or {env_var})"
            ) from None

    return convert


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--judge*`` flags shared by ``score``, ``run``, ``selftest`` and ``calibrate``."""
    env = JudgeEnvironment().get  # the CITEMON_JUDGE* variables (judges/settings.py)
    group = parser.add_argument_group("judge")
    group.add_argument(
        "--judge",
        default=env("CITEMON_JUDGE", "lexical"),
        help="lexical (default), learned, http, classifier, or package.module:factory",
    )
    group.add_argument(
        "--judge-base-url",
        default=env("CITEMON_JUDGE_BASE_URL", _DEFAULTS.base_url),
        help="OpenAI-compatible base URL of the http judge",
    )
    group.add_argument("--judge-model", default=env("CITEMON_JUDGE_MODEL", _DEFAULTS.model))
    group.add_argument(
        "--judge-concurrency",
        type=_number(int, "CITEMON_JUDGE_CONCURRENCY"),
        default=env("CITEMON_JUDGE_CONCURRENCY", str(_DEFAULTS.concurrency)),
        help="hard cap on judge requests in flight (default 8)",
    )
    group.add_argument(
        "--judge-timeout",
        type=_number(float, "CITEMON_JUDGE_TIMEOUT"),
        default=env("CITEMON_JUDGE_TIMEOUT", str(_DEFAULTS.timeout_s)),
        help="seconds per judge request (default 30)",
    )
    group.add_argument(
        "--judge-retries",
        type=_number(int, "CITEMON_JUDGE_RETRIES"),
        default=env("CITEMON_JUDGE_RETRIES", str(_DEFAULTS.retries)),
        help="retries after a failed judge request (default 3)",
    )
    group.add_argument(
        "--judge-protocol",
        choices=("v1", "v2"),
        default=env("CITEMON_JUDGE_PROTOCOL", _DEFAULTS.protocol),
        help="http judge wire contract: v1 (one claim per request, default) or v2 (batched)",
    )
    group.add_argument(
        "--judge-label",
        default=env("CITEMON_JUDGE_LABEL", _DEFAULTS.label),
        help="classifier: the model's entailment label, case-insensitive (default entailment)",
    )
    group.add_argument(
        "--judge-threshold",
        type=_optional(_number(float, "CITEMON_JUDGE_THRESHOLD")),
        default=env("CITEMON_JUDGE_THRESHOLD", ""),
        help="entailed iff P(entailed) >= this (default: the --calibration file's, else 0.5)",
    )
    group.add_argument(
        "--judge-batch-pairs",
        type=_number(int, "CITEMON_JUDGE_BATCH_PAIRS"),
        default=env("CITEMON_JUDGE_BATCH_PAIRS", str(_DEFAULTS.batch_pairs)),
        help="classifier: most (passage, claim) pairs per request (default 32, TEI's cap)",
    )
    group.add_argument(
        "--judge-window-words",
        type=_number(int, "CITEMON_JUDGE_WINDOW_WORDS"),
        default=env("CITEMON_JUDGE_WINDOW_WORDS", str(_DEFAULTS.window_words)),
        help="classifier: longer passages are scored in chunks of this many words (default 300)",
    )
    group.add_argument(
        "--judge-overlap-words",
        type=_number(int, "CITEMON_JUDGE_OVERLAP_WORDS"),
        default=env("CITEMON_JUDGE_OVERLAP_WORDS", str(_DEFAULTS.overlap_words)),
        help="classifier: words shared by consecutive chunks (default 50)",
    )
    group.add_argument(
        "--judge-format",
        choices=("json", "minicheck"),
        default=env("CITEMON_JUDGE_FORMAT", _DEFAULTS.format),
        help="http judge prompt and reply: json (citemon's, structured outputs; default) or "
        "minicheck (MiniCheck's Document/Claim prompt, a Yes/No reply; protocol v1 only)",
    )


def _optional(convert: Callable[[str], int | float]) -> Callable[[str], int | float | None]:
    def optional(value: str) -> int | float | None:
        return None if not value.strip() else convert(value)

    return optional


def judge_options(
    args: argparse.Namespace, *, calibrated_threshold: float | None = None
) -> JudgeOptions:
    """The judge flags; ``calibrated_threshold`` (a calibration file's) applies unless
    ``--judge-threshold`` was given."""
    threshold = args.judge_threshold if args.judge_threshold is not None else calibrated_threshold
    return JudgeOptions(
        base_url=args.judge_base_url,
        model=args.judge_model,
        concurrency=args.judge_concurrency,
        timeout_s=args.judge_timeout,
        retries=args.judge_retries,
        protocol=args.judge_protocol,
        label=args.judge_label,
        threshold=threshold,
        batch_pairs=args.judge_batch_pairs,
        window_words=args.judge_window_words,
        overlap_words=args.judge_overlap_words,
        format=args.judge_format,
    )


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
    spec: str, options: JudgeOptions | None = None, *, observer: JudgeObserver | None = None
) -> Judge:
    """Build the judge named by ``spec``; raises :class:`ConfigError` with the reason."""
    options = options or JudgeOptions()
    judge = _load(spec, options, observer)
    if options.threshold is None or spec == "classifier":
        return judge
    return ThresholdJudge(judge, options.threshold)


def _load(spec: str, options: JudgeOptions, observer: JudgeObserver | None) -> Judge:
    if spec == "lexical":
        from citemon.judges.lexical import LexicalJudge

        return LexicalJudge()
    if spec == "learned":
        from citemon.judges.learned import LearnedJudge  # type: ignore[import-not-found,unused-ignore]

        judge: Any = LearnedJudge()
        return judge  # type: ignore[no-any-return]
    if spec == "http":
        from citemon.judges.http import FORMATS, PROTOCOLS, HTTPBatchJudge, HTTPJudge

        if options.concurrency < 1:
            raise ConfigError("--judge-concurrency must be at least 1")
        if options.protocol not in PROTOCOLS:
            raise ConfigError(f"--judge-protocol must be v1 or v2, not {options.protocol!r}")
        if options.format not in FORMATS:
            raise ConfigError(
                f"--judge-format (or CITEMON_JUDGE_FORMAT) must be json or minicheck, "
                f"not {options.format!r}"
            )
        kind = HTTPBatchJudge if options.protocol == "v2" else HTTPJudge
        return kind(
            options.base_url,
            options.model,
            max_inflight=options.concurrency,
            timeout_s=options.timeout_s,
            retries=options.retries,
            reply_format="minicheck" if options.format == "minicheck" else "json",
            observer=observer,
        )
    if spec == "classifier":
        from citemon.judges.classifier import DEFAULT_THRESHOLD, ClassifierJudge

        if options.concurrency < 1:
            raise ConfigError("--judge-concurrency must be at least 1")
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
            timeout_s=options.timeout_s,
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
