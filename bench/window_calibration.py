"""How often each window of the alert family crosses its bar on stable traffic, over many days.

    .venv/bin/python -m bench window_calibration [--days 300]

The simulation that set the family's thresholds together (grafana/rules/citemon.rules.yml's
header): per cited-claim rate (0.3, 3, 30 a second), ``--days`` days of stable traffic at
p = 0.90 in 15-s steps, and for every window of ``CitationAccuracyDrop`` (1m, 5m, 15m, 1h) the
number of separate episodes in which its z reaches its bar with the minimum effect (0.05) and
its sample guard. The bars and guards are read from the rules file, so this measures what ships.
The z is computed here in numpy with the formula the recording rules use, against the true
p0 (promtool would take hours for 300 days; bench detection_curve runs the real rules through
promtool for 30 days). Two kinds of traffic: binomial claims, and answers of three claims of
which a quarter share one outcome (a within-answer correlation of 0.25: a variance 1.5x the
binomial one). Before ``for:`` and the shorter window's check, which only remove crossings.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["bars", "crossings", "run"]

RULES = Path(__file__).resolve().parent.parent / "grafana" / "rules" / "citemon.rules.yml"
RATES = (0.3, 3.0, 30.0)
BASE = 0.90
STEP_S = 15
STEPS = {"1m": 4, "5m": 20, "15m": 60, "1h": 240}
MIN_EFFECT = 0.05
SEED = 24


def bars() -> dict[str, tuple[float, int]]:
    """window -> (z bar, cited-claim guard) of CitationAccuracyDrop, read from the rules."""
    text = RULES.read_text()
    out = {}
    for window in STEPS:
        (bar,) = set(re.findall(rf"citemon:citation_accuracy_drop:z{window} >= ([\d.]+)", text))
        guard = 60 if window in ("1m", "5m") else 30
        out[window] = (float(bar), guard)
    assert f"citemon:cited_claims:increase1m >= {out['1m'][1]}" in text
    assert f"citemon:cited_claims:increase15m >= {out['15m'][1]}" in text
    return out


def _z(n: np.ndarray, correct: np.ndarray) -> np.ndarray:
    q = np.clip(correct / np.maximum(n, 1), 1e-9, 1 - 1e-9)
    kl = q * np.log(q / BASE) + (1 - q) * np.log((1 - q) / (1 - BASE))
    z: np.ndarray = np.sign(BASE - q) * np.sqrt(np.maximum(2 * n * kl, 0))
    return z


def crossings(rate: float, days: int, icc: float, seed: int = SEED) -> dict[str, int]:
    """window -> episodes above its bar in ``days`` of stable traffic at ``rate``."""
    rng = np.random.default_rng([seed, int(rate * 10), int(icc * 100)])
    steps = days * 86400 // STEP_S
    answers_per_step = rate * STEP_S / 3
    answers = np.diff(np.floor(answers_per_step * np.arange(steps + 1) + 1e-9)).astype(np.int64)
    shared = rng.binomial(answers, icc)  # answers whose three claims share one outcome
    correct = rng.binomial(shared, BASE) * 3 + rng.binomial((answers - shared) * 3, BASE)
    n_cum = np.concatenate([[0], np.cumsum(answers * 3)])
    c_cum = np.concatenate([[0], np.cumsum(correct)])
    out = {}
    for window, (bar, guard) in bars().items():
        k = STEPS[window]
        n, c = n_cum[k:] - n_cum[:-k], c_cum[k:] - c_cum[:-k]
        drop = BASE - c / np.maximum(n, 1)
        hit = (_z(n, c) >= bar) & (drop >= MIN_EFFECT) & (n >= guard)
        out[window] = int(hit[0]) + int(np.sum(hit[1:] & ~hit[:-1]))
    return out


def run(argv: Sequence[str] = ()) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench window_calibration")
    parser.add_argument("--days", type=int, default=300, help="simulated days per rate")
    args = parser.parse_args(list(argv))
    family = bars()
    shown = ", ".join(f"{w} z >= {b:g} (>= {g} claims)" for w, (b, g) in family.items())
    print(f"Bars read from the rules: {shown}; minimum effect {MIN_EFFECT}.")
    print(
        f"Episodes above the bar in {args.days} simulated days of stable traffic at p = "
        f"{BASE} (15-s evaluations, seed {SEED}), per window:"
    )
    print()
    print("| traffic | cited claims/s | " + " | ".join(family) + " |")
    print("|---|---|" + "---|" * len(family))
    for icc, label in ((0.0, "binomial"), (0.25, "answers of 3, correlation 0.25")):
        for rate in RATES:
            got = crossings(rate, args.days, icc)
            print(f"| {label} | {rate:g} | " + " | ".join(str(got[w]) for w in family) + " |")
    sys.stdout.flush()


if __name__ == "__main__":
    run(sys.argv[1:])
