"""The detection curve of ``CitationAccuracyDrop``: today's rules against the ones of issue #19.

    .venv/bin/python -m bench detection_curve [--days 30]

Both rule files are evaluated by the real ``promtool test rules`` (Debian's Prometheus tools) on
generated counters; nothing here re-implements a rule. Before the #19 rules is
``bench/data/rules_before_19.yml`` (the shipped file as it was); after is
``grafana/rules/citemon.rules.yml``. Only their ``citemon.quality`` group is loaded (the
monitor group's alerts need ``up`` series and say nothing about quality).

Detection: per cited-claim rate (0.3, 3, 30 a second) and drop (0.05, 0.10, 0.20, 0.57 from
0.90), a service serves v1 at 0.90 for two hours (its day's baseline), then v2 at 0.90 - drop
takes all traffic for 30 minutes. Scrapes and rule evaluations every 15 s (the shipped
configs); the claims of each scrape are drawn binomially (seeded). The minute of the first page
is read back from the ``ALERTS`` series the rule evaluation wrote (``min_over_time`` of its
timestamps), per ``path``.

False pages: per rate, ``--days`` (30) days of one stable version at p = 0.90 with binomial
noise, scraped and evaluated every 60 s; every minute any ``CitationAccuracyDrop`` fires is
counted, and the number of separate pages. 60 s, not the shipped 15 s: promtool's work grows
with the square of the samples per day (each evaluation reads the 1-day window), and 30 days at
15 s take hours on two cores. promtool's samples sit exactly on the minute and Prometheus 2's
ranges include both ends, so the 1-minute window still holds two samples and both paths are
exercised (a real Prometheus with scrape jitter would leave that window empty at times); the
fast path's rule is, besides, the same text before and after #19 (checked below).
"""

from __future__ import annotations

import argparse
import itertools
import re
import shutil
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

__all__ = ["false_pages", "first_pages", "run"]

REPO = Path(__file__).resolve().parent.parent
RULES = {
    "before #19": REPO / "bench" / "data" / "rules_before_19.yml",
    "after #19": REPO / "grafana" / "rules" / "citemon.rules.yml",
}
RATES = (0.3, 3.0, 30.0)
DROPS = (0.05, 0.10, 0.20, 0.57)
BASE = 0.90
HISTORY_MIN = 120
AFTER_MIN = 30
SEED = 19
#: Scrape and evaluation interval of the stable-traffic runs (see the module's docstring).
STABLE_STEP_S = 60
ALERT = "CitationAccuracyDrop"
_GOT = re.compile(r"\{([^}]*)\} ([-+0-9.E]+)")


def _quality_rules(source: Path, into: Path) -> Path:
    doc = yaml.safe_load(source.read_text())
    doc["groups"] = [g for g in doc["groups"] if g["name"] == "citemon.quality"]
    into.write_text(yaml.safe_dump(doc, sort_keys=False))
    return into


def _claims_per_scrape(rate: float, step_s: int, samples: int) -> np.ndarray:
    """Cited claims per scrape realising ``rate`` exactly on average (floor/ceil mixed)."""
    mean = rate * step_s
    edges = np.floor(mean * np.arange(samples + 1))
    out: np.ndarray = np.diff(edges).astype(np.int64)
    return out


def _series(
    service: str, version: str, verdict: str, increments: Sequence[int | None]
) -> dict[str, str]:
    total, out = 0, []
    for inc in increments:
        if inc is None:
            out.append("_")
        else:
            total += inc
            out.append(str(total))
    labels = (
        f'service="{service}",version="{version}",environment="prod",verdict="{verdict}",'
        'instance="m-0",job="citemon"'
    )
    return {"series": f"citemon_claims_total{{{labels}}}", "values": " ".join(out)}


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


def first_pages(rules: Path, workdir: Path, tag: str, seeds: int) -> dict[tuple[str, str], float]:
    """(service, path) -> minutes from the deploy to the first firing, for every cell and seed
    (each seed is one more service in the same promtool run)."""
    step = 15
    deploy = HISTORY_MIN * 60 // step
    samples = (HISTORY_MIN + AFTER_MIN) * 60 // step + 1
    series = []
    for seed, rate, drop in itertools.product(range(seeds), RATES, DROPS):
        rng = np.random.default_rng([SEED, seed, int(rate * 10), int(drop * 100)])
        cell = Cell(rate, drop, seed)
        n = _claims_per_scrape(rate, step, samples)
        p = np.where(np.arange(samples) <= deploy, BASE, BASE - drop)
        good = rng.binomial(n, p)
        n[0] = good[0] = 0
        for version, serving in (("v1", range(0, deploy + 1)), ("v2", range(deploy, samples))):
            live = set(serving)
            ok: list[int | None] = []
            bad: list[int | None] = []
            for i in range(samples):
                if i not in live:
                    ok.append(None)
                    bad.append(None)
                elif version == "v2" and i == deploy:
                    ok.append(0)  # v2's series are born at the deploy, at 0
                    bad.append(0)
                else:
                    ok.append(int(good[i]))
                    bad.append(int(n[i] - good[i]))
            series.append(_series(cell.service, version, "correct", ok))
            series.append(_series(cell.service, version, "misattributed", bad))
    end_min = HISTORY_MIN + AFTER_MIN
    probe = (
        f'(min_over_time(timestamp(ALERTS{{alertname="{ALERT}",alertstate="firing"}})'
        f"[{AFTER_MIN}m:{step}s]) - {HISTORY_MIN * 60}) / 60"
    )
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": f"{step}s",
        "tests": [{
            "interval": f"{step}s",
            "input_series": series,
            "promql_expr_test": [{"expr": probe, "eval_time": f"{end_min}m", "exp_samples": []}],
        }],
    }  # fmt: skip
    out = _promtool(test, workdir, f"detect-{tag}")
    return {(labels["service"], labels["path"]): value for labels, value in _parse_got(out)}


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


def _fast_path(rules: Path) -> str:
    doc = yaml.safe_load(rules.read_text())
    return str(
        next(
            r["expr"]
            for g in doc["groups"]
            for r in g["rules"]
            if r.get("alert") == ALERT and r["labels"]["path"] == "fast"
        )
    )


def run(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench detection_curve")
    parser.add_argument("--days", type=int, default=30, help="simulated stable days per rate")
    parser.add_argument("--seeds", type=int, default=3, help="noise draws per detection cell")
    args = parser.parse_args(list(argv))
    with tempfile.TemporaryDirectory(prefix="citemon-curve-") as tmp:
        work = Path(tmp)
        rules = {
            tag: _quality_rules(path, work / f"rules-{i}.yml")
            for i, (tag, path) in enumerate(RULES.items())
        }
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=2) as pool:  # one promtool per rules file
            detected = dict(zip(rules, pool.map(
                lambda kv: first_pages(
                    kv[1], work, kv[0].replace(" ", "").replace("#", ""), args.seeds
                ),
                rules.items(),
            ), strict=True))  # fmt: skip
        t_detect = time.perf_counter() - t0
        print(
            f"Minutes from the deploy to the first CitationAccuracyDrop page (0.90 baseline; "
            f"{HISTORY_MIN} min of history, {AFTER_MIN} min watched, 15 s scrapes, binomial "
            f"noise, {args.seeds} seeds, each cell's draws listed; '-' = no page in "
            f"{AFTER_MIN} min); promtool, {t_detect:.0f} s for both files:"
        )
        print()
        print("| drop | cited claims/s | before #19 | after #19 |")
        print("|---|---|---|---|")
        for drop in DROPS:
            for rate in RATES:
                shown = []
                for tag in rules:
                    draws = []
                    for seed in range(args.seeds):
                        service = Cell(rate, drop, seed).service
                        hits = {p: m for (s, p), m in detected[tag].items() if s == service}
                        if not hits:
                            draws.append("-")
                        else:
                            path = min(hits, key=lambda k: hits[k])
                            draws.append(f"{hits[path]:.2f} {path}")
                    shown.append(" / ".join(draws))
                label = f"{drop:.2f} (0.90 → {BASE - drop:.2f})"
                print(f"| {label} | {rate:g} | {shown[0]} | {shown[1]} |")
        if args.days <= 0:
            return
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=2) as pool:
            stable = dict(zip(rules, pool.map(
                lambda kv: false_pages(kv[1], work, kv[0].replace(" ", "").replace("#", ""),
                                       args.days),
                rules.items(),
            ), strict=True))  # fmt: skip
        t_stable = time.perf_counter() - t0
        print()
        print(
            f"False pages on {args.days} simulated days of stable traffic (p = 0.90, binomial "
            f"noise, {STABLE_STEP_S} s scrapes, seed {SEED + 1}); promtool, {t_stable:.0f} s "
            "for both files:"
        )
        print()
        print("| cited claims/s | before #19: pages (minutes firing) | after #19: same |")
        print("|---|---|---|")
        for rate in RATES:
            service = f"stable-r{rate:g}".replace(".", "_")
            cells = [f"{stable[t][service][1]} ({stable[t][service][0]})" for t in rules]
            print(f"| {rate:g} | {cells[0]} | {cells[1]} |")
        same = len({_fast_path(path) for path in rules.values()}) == 1
        print()
        print(f"The fast path's rule is the same before and after #19: {same}")
        sys.stdout.flush()


if __name__ == "__main__":
    run(sys.argv[1:])
