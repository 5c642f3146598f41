"""Judges: what decides whether passages entail a claim.

``--judge`` takes ``lexical`` (the offline default), ``learned`` (the offline trained judge),
``http`` (an OpenAI-compatible endpoint, wire contract v1, or v2 with ``--judge-protocol v2``)
or ``package.module:factory`` (a zero-argument callable returning a :class:`Judge`).
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from monitor.errors import ConfigError
from monitor.judges.base import Judge, JudgeObserver

__all__ = [
    "Judge",
    "JudgeObserver",
    "JudgeOptions",
    "add_judge_arguments",
    "judge_options",
    "load_judge",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class JudgeOptions:
    """Options of the ``http`` judge; the others ignore them."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "judge"
    concurrency: int = 8
    timeout_s: float = 30.0
    retries: int = 3
    protocol: str = "v1"
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
    env = os.environ.get
    group = parser.add_argument_group("judge")
    group.add_argument(
        "--judge",
        default=env("CITEMON_JUDGE", "lexical"),
        help="lexical (default), learned, http, or package.module:factory",
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
        "--judge-format",
        choices=("json", "minicheck"),
        default=env("CITEMON_JUDGE_FORMAT", _DEFAULTS.format),
        help="http judge prompt and reply: json (citemon's, structured outputs; default) or "
        "minicheck (MiniCheck's Document/Claim prompt, a Yes/No reply; protocol v1 only)",
    )


def judge_options(args: argparse.Namespace) -> JudgeOptions:
    return JudgeOptions(
        base_url=args.judge_base_url,
        model=args.judge_model,
        concurrency=args.judge_concurrency,
        timeout_s=args.judge_timeout,
        retries=args.judge_retries,
        protocol=args.judge_protocol,
        format=args.judge_format,
    )


def load_judge(
    spec: str, options: JudgeOptions | None = None, *, observer: JudgeObserver | None = None
) -> Judge:
    """Build the judge named by ``spec``; raises :class:`ConfigError` with the reason."""
    options = options or JudgeOptions()
    if spec == "lexical":
        from monitor.judges.lexical import LexicalJudge

        return LexicalJudge()
    if spec == "learned":
        from monitor.judges.learned import LearnedJudge  # type: ignore[import-not-found,unused-ignore]

        judge: Any = LearnedJudge()
        return judge  # type: ignore[no-any-return]
    if spec == "http":
        from monitor.judges.http import FORMATS, PROTOCOLS, HTTPBatchJudge, HTTPJudge

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
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"unknown judge {spec!r}: use lexical, learned, http or module:factory")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load judge factory {spec!r}: {exc}") from exc
    made = factory()
    if not isinstance(made, Judge):
        raise ConfigError(f"{spec!r} returned {type(made).__name__}, which has no async entails()")
    return made
