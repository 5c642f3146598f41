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

from pydantic import ValidationError

from citemon._core.errors import ConfigError, InputError
from citemon._rollout.compare import (
    compare,
    counts_from_prometheus,
    load_patterns,
    load_scores,
    patterns_from_prometheus,
)

__all__ = ["add_arguments", "main"]

EXIT = {"no evidence": 0, "improved": 0, "regressed": 1, "not enough data": 3}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline", required=True, help="the version deployed before")
    parser.add_argument("--candidate", required=True, help="the version under test")
    parser.add_argument("--service", help="only this service")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus", metavar="URL", help="Prometheus base URL")
    source.add_argument("--scores", metavar="FILE", help="per-answer scores file")
    parser.add_argument("--window", default="1h", help="PromQL range for --prometheus (1h)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    parser.add_argument(
        "--min-effect",
        type=float,
        default=0.02,
        help="smallest difference that counts, in the metric's units (0.02)",
    )
    parser.add_argument(
        "--min-claims",
        type=int,
        default=30,
        help="cited claims each version needs before concluding (30)",
    )
    parser.add_argument(
        "--test",
        choices=("sequential", "fixed"),
        default="sequential",
        help="sequential: always-valid p-values, safe to look at repeatedly (default); "
        "fixed: the one-look two-proportion z-test",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table")  # fmt: skip


def _fmt(x: float | None) -> str:
    return "   n/a" if x is None else f"{x:6.3f}"


def main(args: argparse.Namespace) -> int:
    if not 0 < args.alpha < 1:
        raise ConfigError("--alpha must be between 0 and 1")
    if args.min_effect < 0:
        raise ConfigError(f"--min-effect must be 0 or more, not {args.min_effect}")
    if args.min_claims < 1:  # 0 would let two versions with no data at all pass the gate
        raise ConfigError(f"--min-claims must be at least 1, not {args.min_claims}")
    if args.prometheus:
        counts = counts_from_prometheus(
            args.prometheus, [args.baseline, args.candidate],
            window=args.window, service=args.service,
        )  # fmt: skip
        patterns = patterns_from_prometheus(
            args.prometheus, [args.baseline, args.candidate],
            window=args.window, service=args.service,
        )  # fmt: skip
        source = f"Prometheus over {args.window}"
    else:
        try:
            counts = load_scores(args.scores, service=args.service)
            patterns = load_patterns(args.scores, service=args.service)
        except ValidationError as exc:  # uncaught it exits 1, which here means "regressed"
            first = exc.errors(include_input=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "record"
            raise InputError(
                f"{args.scores} does not hold per-answer scores ({where}: {first['msg']}); "
                "give `citemon score --format json` output or the results topic's JSON lines"
            ) from None
        source = args.scores
    found = sorted(v for v, c in counts.items() if c.judged)
    for version in dict.fromkeys((args.baseline, args.candidate)):
        if version not in found:  # a typo or the wrong file: say so, not just "not enough data"
            print(
                f"citemon: no judged claims of version {version!r} in {source}"
                f" (versions with claims: {', '.join(found) or 'none'})",
                file=sys.stderr,
            )
    result = compare(
        counts, args.baseline, args.candidate,
        alpha=args.alpha, min_effect=args.min_effect, min_claims=args.min_claims,
        test=args.test, patterns=patterns,
    )  # fmt: skip
    if args.format == "json":
        print(json.dumps(result.as_dict(), indent=1))
        return EXIT[result.outcome]
    b, c = result.counts[args.baseline], result.counts[args.candidate]
    print(f"baseline  {args.baseline}: {b.cited} cited claims, {b.uncited} uncited")
    print(f"candidate {args.candidate}: {c.cited} cited claims, {c.uncited} uncited")
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
        if args.test == "sequential"
        else "fixed-sample z-test: valid for one look only"
    )
    print(f"p: {kind}")
    changed = ", ".join(result.changed) or "none"
    print(f"patterns changed: {changed} (p < alpha/{len(result.patterns)}; not in the verdict)")
    print(f"verdict: {result.outcome}")
    return EXIT[result.outcome]
