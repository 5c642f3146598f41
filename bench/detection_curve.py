"""Time to page of ``CitationAccuracyDrop`` against the statistical limit, before and after #24.

    .venv/bin/python -m bench detection_curve [--days 30] [--seeds 3] [--quiet-seeds 20]

Both rule files are evaluated by the real ``promtool test rules`` (Debian's Prometheus tools) on
generated counters; nothing here re-implements a rule. Before is ``bench/data/rules_before_24.yml``
(the shipped file as it was before #24); after is ``grafana/rules/citemon.rules.yml``. Only their
``citemon.quality`` group is loaded (the monitor group's alerts need ``up`` series and say
nothing about quality).

Detection: per cited-claim rate (0.3, 3, 30 a second) and drop (0.10, 0.20, 0.57 from 0.90), a
service serves v1 at 0.90 for two hours, after a day's worth of claims at 0.90 (a version ``v0``
whose counters hold the rest of the day: the baseline holds a day, as in production), then v2
at 0.90 - drop takes all traffic for 45 minutes. Every claim is drawn on its own (seeded
Bernoulli, evenly spaced in time); Prometheus sees their counts per 15-s scrape (the shipped
configs), and v2's series are born at the first scrape after the deploy with what it counted
(as the monitor creates a version's series on its first answer). The minute of the first page
is read back from the ``ALERTS`` series the rule evaluation wrote, per ``path``.

The limit: a CUSUM oracle run on the same claims, one by one, from zero at the deploy: for
p0 = 0.90 against p1 = 0.90 - drop (it knows both), thresholded for one false alarm in 30 days
at that rate (its average run length under p0, 30 days of claims, solved exactly on a fine grid
of its state). It has no scrape or evaluation delay; the target is 2x its time plus one minute.

A new version that has not regressed: the same deploy with v2 at 0.90, ``--quiet-seeds`` draws
per rate; any quality alert for v2 in its first 30 minutes is counted.

False pages: per rate, ``--days`` (30) days of one stable version at p = 0.90 with binomial
noise, scraped and evaluated every 60 s; every minute any ``CitationAccuracyDrop`` fires is
counted, and the number of separate pages. 60 s, not the shipped 15 s: promtool's work grows
with the square of the samples per day (each evaluation reads the 1-day window), and 30 days at
15 s take hours on two cores. promtool's samples sit exactly on the minute and Prometheus 2's
ranges include both ends, so the 1-minute window still holds two samples (one scrape's claims)
and every member of the family is exercised; the rules' own bound is per evaluation, so 15-s
evaluations allow at most four times the rate seen here (the rules file states that bound).

Gates: the rollout gates' time to a decision (Argo's template: a measurement every minute from
minute 2, Inconclusive under 100 cited claims on either side, failed at the second failed
measurement; the measurement is the recorded mixture SPRT p-value that ``citemon compare``
computes, :func:`citemon._core.stats.msprt_p_value`) for a canary at each rate against a stable
version at nine times it (a 10 % canary), simulated in numpy (the gate's arithmetic is one
function; tests/unit/test_rollout_gates.py checks the recording rule against it in promtool).
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from scipy.sparse import csr_matrix, identity
from scipy.sparse.linalg import spsolve

from bench._promtool_series import claims_labels, counter
from citemon._core.stats import msprt_p_value, two_proportion_variance

__all__ = ["cusum_threshold", "false_pages", "first_pages", "run"]

REPO = Path(__file__).resolve().parent.parent
RULES = {
    "before": REPO / "bench" / "data" / "rules_before_24.yml",
    "after": REPO / "grafana" / "rules" / "citemon.rules.yml",
}
RATES = (0.3, 3.0, 30.0)
DROPS = (0.10, 0.20, 0.57)
BASE = 0.90
HISTORY_MIN = 120
AFTER_MIN = 45
QUIET_MIN = 30
STEP_S = 15
SEED = 24
#: Scrape and evaluation interval of the stable-traffic runs (see the module's docstring).
STABLE_STEP_S = 60
ALERT = "CitationAccuracyDrop"
MONTH_S = 30 * 86400
_GOT = re.compile(r"\{([^}]*)\} ([-+0-9.E]+)")


# -- the oracle ------------------------------------------------------------------------------


def _steps(p0: float, p1: float) -> tuple[float, float]:
    """The CUSUM's log-likelihood-ratio step for a correct and for a wrong claim."""
    return math.log(p1 / p0), math.log((1 - p1) / (1 - p0))


def _run_length(p: float, down: float, up: float, h: float, grid: float) -> float:
    """Average claims until the CUSUM (steps ``down`` for correct, ``up`` for wrong, floor 0)
    first reaches ``h`` from 0, claims correct with probability ``p``: the Markov chain of its
    state on a grid, solved exactly."""
    size = math.ceil(h / grid)
    d, u = round(down / grid), round(up / grid)
    rows, cols, vals = [], [], []
    for k in range(size):
        rows.append(k)
        cols.append(max(0, k + d))
        vals.append(p)
        if k + u < size:
            rows.append(k)
            cols.append(k + u)
            vals.append(1 - p)
    chain = csr_matrix((vals, (rows, cols)), shape=(size, size))
    lengths = spsolve((identity(size, format="csc") - chain).tocsc(), np.ones(size))
    return float(lengths[0])


def cusum_threshold(p0: float, p1: float, arl0: float, grid: float = 0.002) -> float:
    """The CUSUM threshold whose average run length under ``p0`` is ``arl0`` claims."""
    down, up = _steps(p0, p1)
    lo, hi = 1.0, 40.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if _run_length(p0, down, up, mid, grid) < arl0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def oracle_seconds(
    outcomes: np.ndarray, times: np.ndarray, p0: float, p1: float, h: float
) -> float:
    """Seconds from the deploy to the claim at which the CUSUM (from 0) reaches ``h``; inf if
    it does not. ``outcomes``: 1 correct, 0 wrong, in arrival order."""
    down, up = _steps(p0, p1)
    s = 0.0
    for i, ok in enumerate(outcomes.tolist()):
        s = max(0.0, s + (down if ok else up))
        if s >= h:
            return float(times[i])
    return math.inf


# -- the simulated traffic -------------------------------------------------------------------


def _quality_rules(source: Path, into: Path) -> Path:
    doc = yaml.safe_load(source.read_text())
    doc["groups"] = [g for g in doc["groups"] if g["name"] == "citemon.quality"]
    into.write_text(yaml.safe_dump(doc, sort_keys=False))
    return into


def _claims_per_scrape(rate: float, step_s: int, samples: int) -> np.ndarray:
    """Cited claims per scrape realising ``rate`` exactly on average (floor/ceil mixed)."""
    mean = rate * step_s
    edges = np.floor(mean * np.arange(samples + 1) + 1e-9)
    out: np.ndarray = np.diff(edges).astype(np.int64)
    return out


def _series(
    service: str, version: str, verdict: str, increments: Sequence[int | None]
) -> dict[str, str]:
    labels = claims_labels(service, version, verdict)
    return {"series": f"citemon_claims_total{{{labels}}}", "values": counter(increments)}


def _promtool(test: Mapping[str, object], workdir: Path, name: str) -> str:
    path = workdir / f"{name}.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False, width=1 << 30))
    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("promtool not found: `make tools` installs Debian's prometheus")
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    return proc.stdout + proc.stderr


def _parse_got(out: str) -> list[tuple[dict[str, str], float]]:
    """The samples promtool printed for a failed expression test (the probe expects none)."""
    found = []
    for line in out.splitlines():
        if "got:" not in line:
            continue
        for labels, value in _GOT.findall(line.split("got:", 1)[1]):
            pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            found.append((pairs, float(value)))
    if "SUCCESS" not in out and not found and "FAILED" not in out:
        raise RuntimeError(f"promtool failed:\n{out[-2000:]}")
    return found


@dataclass(frozen=True, slots=True)
class Cell:
    rate: float
    drop: float
    seed: int

    @property
    def service(self) -> str:
        return f"r{self.rate:g}-d{self.drop:g}-s{self.seed}".replace(".", "_")


@dataclass(frozen=True, slots=True)
class Deploy:
    """One cell's claims: per-scrape counts for promtool, and v2's claims one by one."""

    cell: Cell
    series: list[dict[str, str]]
    outcomes: np.ndarray  # v2's claims in arrival order, 1 = correct
    times: np.ndarray  # their seconds after the deploy


def simulate(cell: Cell, minutes_after: int) -> Deploy:
    rng = np.random.default_rng([SEED, cell.seed, int(cell.rate * 10), int(cell.drop * 100)])
    deploy = HISTORY_MIN * 60 // STEP_S
    samples = (HISTORY_MIN + minutes_after) * 60 // STEP_S + 1
    n = _claims_per_scrape(cell.rate, STEP_S, samples)
    n[0] = 0
    good = rng.binomial(n, BASE)
    outcomes, times = [], []
    for i in range(deploy + 1, samples):  # v2's claims: scrape i counts (t_{i-1}, t_i]
        k = int(n[i])
        draws = (rng.random(k) < BASE - cell.drop).astype(np.int8)
        good[i] = int(draws.sum())
        outcomes.append(draws)
        start = (i - 1 - deploy) * STEP_S
        times.append(start + STEP_S * (np.arange(k) + 1) / max(k, 1))
    # v0: the rest of the service's day, counted before the two hours shown (its counters jump
    # once, then hold: a version whose series the monitor still exports), so the day's
    # baseline holds a day of claims, as in production, not two hours.
    day = round(cell.rate * 86400)
    day_good = int(rng.binomial(day, BASE))
    series = [
        _series(cell.service, "v0", verdict, [0, count, *([0] * (samples - 2))])
        for verdict, count in (("correct", day_good), ("misattributed", day - day_good))
    ]
    for verdict in ("correct", "misattributed"):
        per_scrape = good if verdict == "correct" else n - good
        v1: list[int | None] = [int(per_scrape[i]) if i <= deploy else None for i in range(samples)]
        # v2's series are born at the first scrape after the deploy, holding that scrape's count.
        v2: list[int | None] = [int(per_scrape[i]) if i > deploy else None for i in range(samples)]
        series.append(_series(cell.service, "v1", verdict, v1))
        series.append(_series(cell.service, "v2", verdict, v2))
    return Deploy(cell, series, np.concatenate(outcomes), np.concatenate(times))


def first_pages(
    rules: Path,
    workdir: Path,
    tag: str,
    deploys: Sequence[Deploy],
    minutes_after: int,
    alert: str = ALERT,
) -> dict[tuple[str, str, str], float]:
    """(service, alertname, path) -> minutes from the deploy to v2's first firing (each
    deploy is one more service in the same promtool run)."""
    series = [s for d in deploys for s in d.series]
    firing = f'ALERTS{{alertname=~"{alert}",alertstate="firing",version="v2"}}'
    probe = (
        f"(min by (service, alertname, path) (min_over_time(timestamp({firing})"
        f"[{minutes_after}m:{STEP_S}s])) - {HISTORY_MIN * 60}) / 60"
    )
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": f"{STEP_S}s",
        "tests": [{
            "interval": f"{STEP_S}s",
            "input_series": series,
            "promql_expr_test": [{
                "expr": probe, "eval_time": f"{HISTORY_MIN + minutes_after}m", "exp_samples": [],
            }],
        }],
    }  # fmt: skip
    out = _promtool(test, workdir, f"detect-{tag}")
    return {
        (labels["service"], labels["alertname"], labels["path"]): value
        for labels, value in _parse_got(out)
    }


def false_pages(rules: Path, workdir: Path, tag: str, days: int) -> dict[str, tuple[int, int]]:
    """service -> (minutes with CitationAccuracyDrop firing, separate pages) over ``days``."""
    step = STABLE_STEP_S
    samples = days * 86400 // step + 1
    rng = np.random.default_rng(SEED + 1)
    series = []
    for rate in RATES:
        service = f"stable-r{rate:g}".replace(".", "_")
        n = _claims_per_scrape(rate, step, samples)
        good = rng.binomial(n, BASE)
        n[0] = good[0] = 0
        series.append(_series(service, "v1", "correct", [int(g) for g in good]))
        series.append(_series(service, "v1", "misattributed", [int(b) for b in n - good]))
    firing = f'ALERTS{{alertname="{ALERT}",alertstate="firing"}}'
    window = f"[{days}d:{step}s]"
    probes = [
        f"sum by (service) (count_over_time({firing}{window})) * {step} / 60",
        # A page starts where the series (re)appears: count its absent-then-present steps.
        f"sum by (service) (count_over_time(({firing} unless {firing} offset {step}s){window}))",
    ]
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": f"{step}s",
        "tests": [{
            "interval": f"{step}s",
            "input_series": series,
            "promql_expr_test": [
                {"expr": q, "eval_time": f"{days * 1440}m", "exp_samples": []} for q in probes
            ],
        }],
    }  # fmt: skip
    out = _promtool(test, workdir, f"stable-{tag}")
    # promtool prints each failed expression (the probes expect nothing) in the order given.
    found: list[dict[str, int]] = [{}, {}]
    for chunk in out.split("expr:")[1:]:
        index = 0 if "count_over_time(ALERTS" in chunk.split("\n", 1)[0] else 1
        for labels, value in _parse_got(chunk):
            found[index][labels["service"]] = round(value)
    services = [f"stable-r{rate:g}".replace(".", "_") for rate in RATES]
    return {s: (found[0].get(s, 0), found[1].get(s, 0)) for s in services}


# -- the gates -------------------------------------------------------------------------------

GATE_GUARD = 100
GATE_RUNS = 400
GATE_MAX_MIN = 60


def gate_minutes(rate: float, drop: float, runs: int = GATE_RUNS) -> list[float]:
    """Minutes from the canary's start to the gate's failure (inf: none within an hour)."""
    rng = np.random.default_rng([SEED, int(rate * 10), int(drop * 100)])
    canary_per_min = rate * 60
    stable_per_min = 9 * canary_per_min
    out = []
    for _ in range(runs):
        nc = rng.poisson(canary_per_min, GATE_MAX_MIN + 1)
        ns = rng.poisson(stable_per_min, GATE_MAX_MIN + 16)
        sc = rng.binomial(nc, BASE - drop)
        ss = rng.binomial(ns, BASE)
        fails, when = 0, math.inf
        for minute in range(2, GATE_MAX_MIN + 1):
            lo = max(0, minute - 14)  # the 15-minute window: the canary's whole life at first
            c_n, c_ok = int(nc[lo : minute + 1].sum()), int(sc[lo : minute + 1].sum())
            s_n, s_ok = int(ns[minute : minute + 15].sum()), int(ss[minute : minute + 15].sum())
            if c_n < GATE_GUARD or s_n < GATE_GUARD:
                continue
            delta = c_ok / c_n - s_ok / s_n
            variance = two_proportion_variance(s_ok, s_n, c_ok, c_n)
            p = msprt_p_value(delta, variance, 0.1) if variance else None
            fails += p is not None and delta < -0.02 and p < 0.05
            if fails == 2:
                when = float(minute)
                break
        out.append(when)
    return out


# -- the report ------------------------------------------------------------------------------


def _fmt(minutes: float) -> str:
    return "-" if math.isinf(minutes) else f"{minutes:.2f}"


def run(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench detection_curve")
    parser.add_argument("--days", type=int, default=30, help="simulated stable days per rate")
    parser.add_argument("--seeds", type=int, default=3, help="noise draws per detection cell")
    parser.add_argument("--quiet-seeds", type=int, default=20,
                        help="draws per rate of a new version that has not regressed")  # fmt: skip
    args = parser.parse_args(list(argv))
    t0 = time.perf_counter()
    thresholds = {
        (rate, drop): cusum_threshold(BASE, BASE - drop, rate * MONTH_S)
        for rate in RATES
        for drop in DROPS
    }
    limit_min: dict[tuple[float, float], float] = {}
    for (rate, drop), h in thresholds.items():
        down, up = _steps(BASE, BASE - drop)
        limit_min[(rate, drop)] = _run_length(BASE - drop, down, up, h, 0.002) / rate / 60
    # The targets: for the moderate drops 2x the limit (the oracle on the same claims)
    # plus a minute of scrape and evaluation (the 2x its average is listed too); the severe
    # drop within 1.5 minutes at 3 a second. Other cells are reported only.
    target = {(r, d): 2 * limit_min[(r, d)] + 1 for r in RATES for d in DROPS if d < 0.5}
    target[(3.0, 0.57)] = 1.5
    print(
        "The limit: the CUSUM for 0.90 -> 0.90 - drop with one false alarm in 30 days at the rate "
        f"(threshold h on its log-likelihood ratio; solved in {time.perf_counter() - t0:.0f} s):"
    )
    for rate in RATES:
        parts = []
        for drop in DROPS:
            h = thresholds[(rate, drop)]
            claims = limit_min[(rate, drop)] * rate * 60
            parts.append(f"{drop:.2f}: h = {h:.1f}, {claims:.0f} claims = "
                         f"{limit_min[(rate, drop)]:.2f} min on average")  # fmt: skip
        print(f"  {rate:g} cited claims/s: " + "; ".join(parts))
    cells = [Cell(r, d, s) for s, r, d in itertools.product(range(args.seeds), RATES, DROPS)]
    quiet = [Cell(r, 0.0, s) for s, r in itertools.product(range(args.quiet_seeds), RATES)]
    deploys = [simulate(c, AFTER_MIN) for c in cells]
    calm = [simulate(c, QUIET_MIN) for c in quiet]
    oracle = {
        d.cell: oracle_seconds(d.outcomes, d.times, BASE, BASE - d.cell.drop,
                               thresholds[(d.cell.rate, d.cell.drop)]) / 60
        for d in deploys
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="citemon-curve-") as tmp:
        work = Path(tmp)
        rules = {
            tag: _quality_rules(path, work / f"rules-{i}.yml")
            for i, (tag, path) in enumerate(RULES.items())
        }
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=2) as pool:  # one promtool per rules file
            detected = dict(zip(rules, pool.map(
                lambda kv: first_pages(kv[1], work, kv[0], deploys, AFTER_MIN), rules.items(),
            ), strict=True))  # fmt: skip
            silent = dict(zip(rules, pool.map(
                lambda kv: first_pages(kv[1], work, f"quiet-{kv[0]}", calm, QUIET_MIN,
                                       alert="Citation.*"),
                rules.items(),
            ), strict=True))  # fmt: skip
        t_detect = time.perf_counter() - t0
        print()
        print(
            f"Minutes from the deploy to the first {ALERT} page (0.90 baseline; {HISTORY_MIN} "
            f"min of history, {AFTER_MIN} min watched, {STEP_S} s scrapes, each claim drawn on "
            f"its own, {args.seeds} seeds, each cell's draws listed with the path; '-' = no "
            f"page), the limit (the oracle's average), the oracle run on each draw's claims and "
            f"the ratio after / that, and the target; promtool, {t_detect:.0f} s for both files:"
        )
        print()
        print("| drop | cited claims/s | limit (average) | before | after | oracle, same claims | "
              "after / oracle | target (min): met |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|")
        met_all = True
        for drop in DROPS:
            for rate in RATES:
                shown, ratios, limits, met = [], [], [], []
                for tag in rules:
                    draws = []
                    for seed in range(args.seeds):
                        cell = Cell(rate, drop, seed)
                        hits = {p: m for (s, _, p), m in detected[tag].items() if s == cell.service}
                        if not hits:
                            draws.append("-")
                            minutes = math.inf
                        else:
                            path = min(hits, key=lambda k: hits[k])
                            minutes = hits[path]
                            draws.append(f"{minutes:.2f} {path}")
                        if tag == "after":
                            limit = oracle[cell]
                            limits.append(_fmt(limit))
                            ratios.append("-" if math.isinf(minutes) else f"{minutes / limit:.1f}")
                            goal = target.get((rate, drop))
                            if goal is not None:  # 2x the oracle on these claims + 1 min
                                met.append(minutes <= (goal if drop > 0.5 else 2 * limit + 1))
                    shown.append(" / ".join(draws))
                label = f"{drop:.2f} (0.90 → {BASE - drop:.2f})"
                if (rate, drop) in target:
                    met_all &= all(met)
                    what = "2 x oracle + 1" if drop < 0.5 else f"{target[(rate, drop)]:g}"
                    verdict = f"{what}: {' / '.join('yes' if m else 'NO' for m in met)}"
                else:
                    verdict = "(none)"
                cols = [label, f"{rate:g}", f"{limit_min[(rate, drop)]:.2f}", *shown,
                        " / ".join(limits), " / ".join(ratios), verdict]  # fmt: skip
                print("| " + " | ".join(cols) + " |")
        print()
        print(f"Every cell within its target: {met_all}")
        print()
        print(
            f"A new version that has not regressed (v2 at 0.90 after the same 2 h of v1, "
            f"{args.quiet_seeds} draws per rate): quality alerts for v2 in its first "
            f"{QUIET_MIN} minutes:"
        )
        print()
        print("| cited claims/s | before | after |")
        print("|---|---|---|")
        for rate in RATES:
            counts = []
            for tag in rules:
                names = {Cell(rate, 0.0, s).service for s in range(args.quiet_seeds)}
                counts.append(sum(1 for (s, _, _) in silent[tag] if s in names))
            print(f"| {rate:g} | {counts[0]} of {args.quiet_seeds} | {counts[1]} of "
                  f"{args.quiet_seeds} |")  # fmt: skip
        print()
        t0 = time.perf_counter()
        print(
            f"Rollout gates' time to a decision (a canary at the rate against a stable version at "
            f"9x; Argo's template, mixture SPRT p < 0.05 twice, >= {GATE_GUARD} claims a side; "
            f"{GATE_RUNS} simulated canaries a cell): median minutes (10th-90th percentile), "
            f"share decided within the template's ten looks (minute 11):"
        )
        print()
        print("| drop | cited claims/s (canary) | gate: minutes | within ten looks | alert after |")
        print("|---|---|---|---|---|")
        for drop in DROPS:
            for rate in RATES:
                mins = sorted(gate_minutes(rate, drop))
                finite = [m for m in mins if not math.isinf(m)]
                mid = statistics.median(mins)
                lo, hi = mins[len(mins) // 10], mins[(9 * len(mins)) // 10]
                within = sum(1 for m in finite if m <= 11) / len(mins)
                alert = []
                for seed in range(args.seeds):
                    pages = [m for (s, _, _), m in detected["after"].items()
                             if s == Cell(rate, drop, seed).service]  # fmt: skip
                    alert.append(_fmt(min(pages)) if pages else "-")
                print(f"| {drop:.2f} | {rate:g} | {_fmt(mid)} ({_fmt(lo)}-{_fmt(hi)}) | "
                      f"{within:.2f} | {' / '.join(alert)} |")  # fmt: skip
        print(f"(gates: {time.perf_counter() - t0:.0f} s)")
        if args.days <= 0:
            return
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=2) as pool:
            stable = dict(zip(rules, pool.map(
                lambda kv: false_pages(kv[1], work, kv[0], args.days), rules.items(),
            ), strict=True))  # fmt: skip
        t_stable = time.perf_counter() - t0
        print()
        print(
            f"False pages on {args.days} simulated days of stable traffic (p = 0.90, binomial "
            f"noise, {STABLE_STEP_S} s scrapes, seed {SEED + 1}); promtool, {t_stable:.0f} s "
            "for both files:"
        )
        print()
        print("| cited claims/s | before: pages (minutes firing) | after: same |")
        print("|---|---|---|")
        for rate in RATES:
            service = f"stable-r{rate:g}".replace(".", "_")
            shown_pages = [f"{stable[t][service][1]} ({stable[t][service][0]})" for t in rules]
            print(f"| {rate:g} | {shown_pages[0]} | {shown_pages[1]} |")
        sys.stdout.flush()


if __name__ == "__main__":
    run(sys.argv[1:])
