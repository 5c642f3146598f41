"""The canary gate looked at every minute: the fixed 0.1 gap (before #19) against the mixture
SPRT's always-valid p-value (after), as Argo Rollouts runs the shipped AnalysisTemplate.

    .venv/bin/python -m bench gate_looks

Simulated, seeded: a stable version serves a steady rate of cited claims; a canary starts at
minute 0 with a tenth of it. The template's ``citation-accuracy-vs-stable`` metric is measured
at minutes 2..11 (``initialDelay: 2m``, ``interval: 1m``, ``count: 10``) on the 15-minute
window (the canary's whole life; the stable version's last 15 minutes), Inconclusive below 100
cited claims on either side, and the analysis fails at the second failed measurement
(``failureLimit: 1``). Before #19 a measurement fails when canary minus stable < -0.1; after,
when the recorded always-valid p-value (:func:`citemon._core.stats.msprt_p_value`, mixture sd
0.1, the formula of ``citemon:citation_accuracy_vs_rest:msprt_p15m``; tests/unit/
test_rollout_gates.py checks the recording rule gives the same numbers in promtool) is < 0.05
while the canary is more than 0.02 below. Printed: the share of canaries failed (healthy ones:
the false-fail rate) and the median minute of the failure.
"""

from __future__ import annotations

import statistics

import numpy as np

from citemon._core.stats import msprt_p_value, two_proportion_variance

__all__ = ["run"]

RUNS = 4000
SEED = 19
LOOKS = range(2, 12)
GUARD = 100


def _gate(kind: str, sc: int, nc: int, ss: int, ns: int) -> bool | None:
    """One measurement: True failed, False passed, None inconclusive."""
    if nc < GUARD or ns < GUARD:
        return None
    delta = sc / nc - ss / ns
    if kind == "before":
        return delta < -0.1
    variance = two_proportion_variance(ss, ns, sc, nc)
    p = msprt_p_value(delta, variance, 0.1) if variance else None
    value = p if (p is not None and delta < -0.02) else 1.0
    return value < 0.05


def _simulate(p_stable: float, p_canary: float, stable_per_min: int) -> dict[str, list[int]]:
    """kind -> the minute each failed run failed (runs that never failed are left out)."""
    rng = np.random.default_rng([SEED, stable_per_min, int(p_stable * 100), int(p_canary * 100)])
    canary_per_min = stable_per_min // 10
    failed: dict[str, list[int]] = {"before": [], "after": []}
    for _ in range(RUNS):
        stable = rng.binomial(stable_per_min, p_stable, size=26)  # minutes -14 .. 11
        canary = rng.binomial(canary_per_min, p_canary, size=12)  # minutes 0 .. 11
        for kind in failed:
            fails = 0
            for minute in LOOKS:
                ss = int(stable[minute : minute + 15].sum())
                sc = int(canary[: minute + 1].sum())
                verdict = _gate(kind, sc, canary_per_min * (minute + 1), ss, stable_per_min * 15)
                fails += verdict is True
                if fails == 2:
                    failed[kind].append(minute)
                    break
    return failed


def run() -> None:
    print(
        f"Canary gate looked at every minute, {RUNS} simulated canaries per row (seed {SEED}); "
        "share failed (median minute of the failure):"
    )
    print()
    print("| stable accuracy | canary accuracy | stable / canary claims a minute | before #19 | "
          "after #19 |")  # fmt: skip
    print("|---|---|---|---|---|")
    for p_stable, p_canary in ((0.9, 0.9), (0.6, 0.6), (0.9, 0.8), (0.9, 0.333)):
        for per_min in (180, 1800):
            failed = _simulate(p_stable, p_canary, per_min)
            cells = []
            for kind in ("before", "after"):
                minutes = failed[kind]
                share = len(minutes) / RUNS
                when = f" ({statistics.median(minutes):g} min)" if minutes else ""
                cells.append(f"{share:.3f}{when}")
            print(f"| {p_stable:g} | {p_canary:g} | {per_min} / {per_min // 10} | "
                  f"{cells[0]} | {cells[1]} |")  # fmt: skip
