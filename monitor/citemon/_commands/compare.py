"""Compare a candidate version's citation quality with a baseline's: a deploy gate.

Reads counts from Prometheus (--prometheus URL, over --window) or from a file of per-answer
scores (--scores FILE: `citemon.scores` JSON lines or `citemon score --format json` output).
Exit status: 0 no evidence of a regression (or improved), 1 regressed, 3 not enough data,
2 error. The p-values are always-valid (mixture SPRT, ``--test sequential``, the default): a
pipeline may run the gate every minute and stop at the first "regressed" without failing a
healthy candidate more often than ``--alpha``. ``--test fixed`` decides on the one-look z-test.
Beside the verdict, never part of it: each misattribution pattern's rate per cited claim and
which of them the candidate changed, and each version's multi-hop ceiling.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, ClassVar, Literal

from pydantic import ValidationError, field_validator
from pydantic_settings import SettingsConfigDict

from citemon._core.errors import ConfigError, InputError
from citemon._core.settings import MAIN, Exclusive, Flag, FlagSettings
from citemon._rollout.compare import (
    compare,
    counts_from_prometheus,
    load_patterns,
    load_scores,
    patterns_from_prometheus,
)

__all__ = ["CompareSettings", "add_arguments", "main"]

EXIT = {"no evidence": 0, "improved": 0, "regressed": 1, "not enough data": 3}


class CompareSettings(FlagSettings):
    """``citemon compare``'s settings, each with its variable ``CITEMON_COMPARE_<FIELD>`` (a
    rollout gate sets them once in its environment), but for the comparison's own arguments:
    the versions (``--baseline``, ``--candidate``) and the source (``--prometheus`` or
    ``--scores``, exactly one) are flag only."""

    model_config = SettingsConfigDict(
        env_prefix="CITEMON_COMPARE_", extra="ignore", validate_default=True, frozen=True
    )
    TITLE: ClassVar[str] = "compare"
    FLAGS: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--baseline",
            "baseline",
            "the version deployed before",
            env=False,
            required=True,
            group=MAIN,
        ),
        Flag(
            "--candidate",
            "candidate",
            "the version under test",
            env=False,
            required=True,
            group=MAIN,
        ),
        Flag(
            "--prometheus",
            "prometheus",
            "Prometheus base URL",
            metavar="URL",
            env=False,
            group=MAIN,
        ),
        Flag("--scores", "scores", "per-answer scores file", metavar="FILE", env=False, group=MAIN),
        Flag("--service", "service", "only this service", metavar="SERVICE"),
        Flag("--window", "window", "PromQL range for --prometheus (1h)", metavar="WINDOW"),
        Flag("--alpha", "alpha", "significance level (0.05)", float, metavar="ALPHA"),
        Flag(
            "--min-effect",
            "min_effect",
            "smallest difference that counts, in the metric's units (0.02)",
            float,
            metavar="MIN_EFFECT",
        ),
        Flag(
            "--min-claims",
            "min_claims",
            "cited claims each version needs before concluding (30)",
            int,
            metavar="MIN_CLAIMS",
        ),
        Flag(
            "--test",
            "test",
            "sequential: always-valid p-values, safe to look at repeatedly (default); "
            "fixed: the one-look two-proportion z-test",
            choices=("sequential", "fixed"),
        ),
        Flag("--format", "format", "table (default) or json", choices=("table", "json")),
    )
    EXCLUSIVE: ClassVar[tuple[Exclusive, ...]] = (
        Exclusive(("prometheus", "scores"), required=True),
    )

    baseline: str
    candidate: str
    prometheus: str | None = None
    scores: str | None = None
    service: str | None = None
    window: str = "1h"
    alpha: float = 0.05
    min_effect: float = 0.02
    min_claims: int = 30
    test: Literal["sequential", "fixed"] = "sequential"
    format: Literal["table", "json"] = "table"

    @field_validator("service", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    CompareSettings.add_arguments(parser, title="compare")


def _fmt(x: float | None) -> str:
    return "   n/a" if x is None else f"{x:6.3f}"


def main(args: argparse.Namespace) -> int:
    own = CompareSettings.from_args(args)
    if not 0 < own.alpha < 1:
        raise ConfigError("--alpha must be between 0 and 1")
    if own.min_effect < 0:
        raise ConfigError(f"--min-effect must be 0 or more, not {own.min_effect}")
    if own.min_claims < 1:  # 0 would let two versions with no data at all pass the gate
        raise ConfigError(f"--min-claims must be at least 1, not {own.min_claims}")
    if own.prometheus is not None:
        counts = counts_from_prometheus(
            own.prometheus, [own.baseline, own.candidate],
            window=own.window, service=own.service,
        )  # fmt: skip
        patterns = patterns_from_prometheus(
            own.prometheus, [own.baseline, own.candidate],
            window=own.window, service=own.service,
        )  # fmt: skip
        source = f"Prometheus over {own.window}"
    elif own.scores is None:  # argparse has made sure; a model built in code may not have
        raise ConfigError("give --prometheus URL or --scores FILE")
    else:
        try:
            counts = load_scores(own.scores, service=own.service)
            patterns = load_patterns(own.scores, service=own.service)
        except ValidationError as exc:  # uncaught it exits 1, which here means "regressed"
            first = exc.errors(include_input=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "record"
            raise InputError(
                f"{own.scores} does not hold per-answer scores ({where}: {first['msg']}); "
                "give `citemon score --format json` output or the results topic's JSON lines"
            ) from None
        source = own.scores
    found = sorted(v for v, c in counts.items() if c.judged)
    for version in dict.fromkeys((own.baseline, own.candidate)):
        if version not in found:  # a typo or the wrong file: say so, not just "not enough data"
            print(
                f"citemon: no judged claims of version {version!r} in {source}"
                f" (versions with claims: {', '.join(found) or 'none'})",
                file=sys.stderr,
            )
    result = compare(
        counts, own.baseline, own.candidate,
        alpha=own.alpha, min_effect=own.min_effect, min_claims=own.min_claims,
        test=own.test, patterns=patterns,
    )  # fmt: skip
    if own.format == "json":
        print(json.dumps(result.as_dict(), indent=1))
        return EXIT[result.outcome]
    b, c = result.counts[own.baseline], result.counts[own.candidate]
    print(f"baseline  {own.baseline}: {b.cited} cited claims, {b.uncited} uncited")
    print(f"candidate {own.candidate}: {c.cited} cited claims, {c.uncited} uncited")
    print(f"{'metric':<18} {'baseline':>22} {'candidate':>22} {'delta':>7} {'p':>7}")
    for t in result.tests:

        def cell(value: float | None, ci: tuple[float, float] | None) -> str:
            band = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
            return f"{_fmt(value)}{band}"

        p = "n/a" if t.p_value is None else "<1e-6" if t.p_value < 1e-6 else f"{t.p_value:.3g}"
        print(f"{t.name:<18} {cell(t.baseline, t.baseline_ci95):>22} "
              f"{cell(t.candidate, t.candidate_ci95):>22} {_fmt(t.delta):>7} {p:>7}")  # fmt: skip
    print("misattributed claims per cited claim, by pattern:")
    for t in result.patterns:
        p = "n/a" if t.p_value is None else "<1e-6" if t.p_value < 1e-6 else f"{t.p_value:.3g}"
        flag = "  changed" if t.name in result.changed else ""
        base, cand = cell(t.baseline, t.baseline_ci95), cell(t.candidate, t.candidate_ci95)
        print(f" {t.name:<17} {base:>22} {cand:>22} {_fmt(t.delta):>7} {p:>7}{flag}")
    print(
        f"{'multi-hop ceiling':<18} {_fmt(b.multi_hop_ceiling):>22} {_fmt(c.multi_hop_ceiling):>22}"
    )
    kind = (
        "always-valid (mixture SPRT): safe to look at repeatedly"
        if own.test == "sequential"
        else "fixed-sample z-test: valid for one look only"
    )
    print(f"p: {kind}")
    changed = ", ".join(result.changed) or "none"
    print(f"patterns changed: {changed} (p < alpha/{len(result.patterns)}; not in the verdict)")
    print(f"verdict: {result.outcome}")
    return EXIT[result.outcome]
