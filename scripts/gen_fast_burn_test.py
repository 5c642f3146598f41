"""Write grafana/rules/tests/fast_burn_test.yml: the fast and slow alert paths at 15-s scrapes.

    .venv/bin/python scripts/gen_fast_burn_test.py

(tests/unit/test_grafana.py checks that the file is what this writes.)

The input series are counters sampled every 15 s (a scrape interval users set; the 1-minute
window needs more than one sample a minute), written out sample by sample because the traffic
alternates (0.90 is 14, 13, 14, 13 correct claims of 15 per scrape) or is seeded noise. The
expectations below are hand-written; the generator only saves typing the counters.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # bench/, without installing
from bench._promtool_series import counter  # noqa: E402 (path set above)

OUT = Path(__file__).resolve().parent.parent / "grafana" / "rules" / "tests" / "fast_burn_test.yml"
STEP_S = 15
PER_MIN = 60 // STEP_S
END_MIN = 90
SAMPLES = END_MIN * PER_MIN + 1  # 0 .. 90 m inclusive


def at(minute: float) -> int:
    return round(minute * PER_MIN)


def pattern(values: Sequence[int], start: float, end: float) -> list[int | None]:
    """``values`` repeated per scrape from ``start`` (first sample one scrape later) to ``end``
    minutes; no samples outside (a version that is not serving)."""
    first, last = at(start), at(end)
    return [
        values[i % len(values)] if first <= i <= last else None for i in range(SAMPLES)
    ]  # fmt: skip


def merge(first: list[int | None], then: list[int | None]) -> list[int | None]:
    """One series from two stretches of traffic (``first`` wins where both have a sample)."""
    return [a if a is not None else b for a, b in zip(first, then, strict=True)]


def overlay(base: list[int | None], start: float, end: float, value: int) -> list[int | None]:
    out = list(base)
    for i in range(at(start) + 1, at(end) + 1):
        out[i] = value
    return out


# One cited claim a second = 15 per scrape; 0.90 of them correct.
CORRECT_90 = (14, 13, 14, 13)
WRONG_90 = (1, 2, 1, 2)


def series(name: str, labels: dict[str, str], increments: Sequence[int | None]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items()).replace("'", "''")
    return f"      - series: '{name}{{{inner}}}'\n        values: '{counter(increments)}'\n"


def claims(
    service: str, version: str, verdict: str, increments: Sequence[int | None], env: str = "prod"
) -> str:
    labels = {
        "service": service,
        "version": version,
        "environment": env,
        "verdict": verdict,
        "instance": "m-0",
        "job": "citemon",
    }
    return series("citemon_claims_total", labels, increments)


def ids(service: str, version: str, increments: Sequence[int | None], env: str = "prod") -> str:
    labels = {
        "service": service,
        "version": version,
        "environment": env,
        "instance": "m-0",
        "job": "citemon",
    }
    return series("citemon_cited_ids_total", labels, increments)


def inputs() -> str:
    rng = random.Random(13)
    parts = []
    # severe: v1 0.90 for an hour; v2 0.33 (5 of 15 correct) from 60 m; rolled back at 66 m.
    for verdict, v1 in (("correct", CORRECT_90), ("misattributed", WRONG_90)):
        serving = merge(pattern(v1, 0, 60), pattern(v1, 66, END_MIN))
        parts.append(claims("severe", "v1", verdict, serving))
    parts.append(claims("severe", "v2", "correct", pattern((5,), 60.25, 66)))
    parts.append(claims("severe", "v2", "misattributed", pattern((10,), 60.25, 66)))
    # moderate: v1 0.90; v2 0.67 (10 of 15) from 60 m, fixed in place (same version) at 80 m.
    for verdict, v1, bad in (("correct", CORRECT_90, 10), ("misattributed", WRONG_90, 5)):
        parts.append(claims("moderate", "v1", verdict, pattern(v1, 0, 60)))
        fixed = merge(pattern((bad,), 60.25, 80), pattern(v1, 80.25, END_MIN))
        parts.append(claims("moderate", "v2", verdict, fixed))
    # blip: 0.90 all along but for one scrape (60-60.25 m) in which every cited claim is wrong.
    parts.append(
        claims("blip", "v1", "correct", overlay(pattern(CORRECT_90, 0, END_MIN), 60, 60.25, 0))
    )
    parts.append(
        claims("blip", "v1", "misattributed", overlay(pattern(WRONG_90, 0, END_MIN), 60, 60.25, 15))
    )
    # noisy: 15 claims a scrape, each correct with p = 0.85 (seeded binomial noise).
    noisy = [sum(rng.random() < 0.85 for _ in range(15)) for _ in range(SAMPLES)]
    parts.append(claims("noisy", "v1", "correct", [0, *noisy[1:]]))
    parts.append(claims("noisy", "v1", "misattributed", [0, *(15 - n for n in noisy[1:])]))
    # quiet: from 60 m, five cited claims in two minutes, all wrong, then nothing more.
    wrong = [None if i < at(60) else 0 for i in range(SAMPLES)]
    for minute in (60.25, 60.5, 61, 61.5, 62):
        wrong[at(minute)] = 1
    parts.append(claims("quiet", "v1", "misattributed", wrong))
    parts.append(claims("quiet", "v1", "correct", [None if w is None else 0 for w in wrong]))
    # tenth: three cited claims a second (45 a scrape); v1 0.90, v2 0.80 (36 of 45) from 60 m.
    for verdict, v1, bad in (("correct", (41, 40), 36), ("misattributed", (4, 5), 9)):
        parts.append(claims("tenth", "v1", verdict, pattern(v1, 0, 60)))
        parts.append(claims("tenth", "v2", verdict, pattern((bad,), 60.25, END_MIN)))
    # noisy3: 45 claims a scrape, each correct with p = 0.90 (seeded binomial noise).
    noisy3 = [sum(rng.random() < 0.9 for _ in range(45)) for _ in range(SAMPLES)]
    parts.append(claims("noisy3", "v1", "correct", [0, *noisy3[1:]]))
    parts.append(claims("noisy3", "v1", "misattributed", [0, *(45 - n for n in noisy3[1:])]))
    # dip: 30 cited claims a second (450 a scrape); v1 0.90, v2 0.87 from 60 m: certain, small.
    for verdict, v1, v2 in (("correct", (405,), (392, 391)), ("misattributed", (45,), (58, 59))):
        parts.append(claims("dip", "v1", verdict, pattern(v1, 0, 60)))
        parts.append(claims("dip", "v2", verdict, pattern(v2, 60.25, END_MIN)))
    # gamer: accuracy 0.90 throughout; IDs per claim 1.2 (18 per 15 claims), v2 from 60 m
    # cites 3.4 (51 per 15). broad: v2 cites 2.2 (33 per 15): a moderate climb.
    for service, v2_ids, v2 in (("gamer", 51, "v2'rc1"), ("broad", 33, "v2")):
        parts.append(claims(service, "v1", "correct", pattern(CORRECT_90, 0, 60)))
        parts.append(claims(service, "v1", "misattributed", pattern(WRONG_90, 0, 60)))
        parts.append(ids(service, "v1", pattern((18,), 0, 60)))
        parts.append(claims(service, v2, "correct", pattern(CORRECT_90, 60.25, END_MIN)))
        parts.append(claims(service, v2, "misattributed", pattern(WRONG_90, 60.25, END_MIN)))
        parts.append(ids(service, v2, pattern((v2_ids,), 60.25, END_MIN)))
    return "".join(parts)


HEADER = """\
# promtool unit tests for the two paths of the quality alerts (promtool test rules <this file>).
# GENERATED by scripts/gen_fast_burn_test.py (the counters); edit the expectations there.
#
# Scrapes and rule evaluations every 15 s; one cited claim a second per service unless noted
# (a conservative reading of the issue's "one answer a second": the demo's answers carry three).
#   severe    v1 at 0.90 for an hour; the deploy at 60 m takes all traffic to v2 at 0.33 (5 of
#             15 correct per scrape); rolled back to v1 at 66 m. Both paths page within 1.5
#             minutes of the deploy (the fast one on the evidence, the slow one on the floor)
#             and stop within two minutes of the rollback.
#   moderate  v1 0.90 -> v2 0.67 at 60 m: both paths page on the evidence within 2.5 minutes;
#             fixed in place (same version) at 80 m: the fast path resolves within a minute,
#             the slow one once its 15-minute window has recovered (its 1-hour member's check).
#   blip      0.90 throughout but for one scrape (60-60.25 m) with every cited claim wrong:
#             15 claims, not evidence enough (a whole minute of it, 60 claims, would page).
#   noisy     each claim correct with p = 0.85, seeded binomial noise, for 90 minutes.
#   quiet     five cited claims, all wrong, between 60 m and 62 m: far below every guard.
#   tenth     three cited claims a second (45 a scrape): v1 0.90 -> v2 0.80 at 60 m (the share
#             of wrong citations doubles): pages within 3 minutes (slow first, then fast).
#   noisy3    three cited claims a second, each correct with p = 0.90 (seeded noise): nothing.
#   dip       30 cited claims a second: v1 0.90 -> v2 0.87 at 60 m, a certain but small dip
#             (z over 10 in 15 minutes): under the 0.05 minimum effect, never pages.
#   gamer     IDs per claim 1.2 -> 3.4 at 60 m (version v2'rc1: the inspect line quotes it).
#   broad     IDs per claim 1.2 -> 2.2 at 60 m: a moderate climb, as much evidence at this
#             volume: both paths page it within two minutes.
# (The history is one hour, so the day's baseline holds the new version's claims: a third of
# it by 90 m. That pulls the baseline toward v2 and ends some pages early after 80 m; with a
# real day of history the pull is under 5 %.)
rule_files:
  - ../citemon.rules.yml

evaluation_interval: 15s

tests:
  - interval: 15s
    input_series:
"""


NO_MISATTRIBUTION_WHY = (
    "No misattributed claim in the last 15 minutes: the drop is in the other verdicts "
    "(unsupported, multi_hop, dangling)."
)
"""CitationAccuracyDrop's ``why`` annotation when the version has no misattributed claim."""


def inspect(service: str, version: str, env: str = "prod") -> str:
    quoted = version.replace("'", "'\\''")
    return (
        f"citemon inspect --service '{service}' --version '{quoted}' "
        f"--environment '{env}' --since 30m"
    )


def where(service: str, version: str) -> str:
    label = '"' + version + '"' if "'" in version else version
    return f"service: {service}, version: {label}, environment: prod"


def accuracy_alert(service: str, version: str, path: str, pct: str) -> str:
    if path == "fast":
        summary = f"Citation accuracy of {service} {version} (prod) fell to {pct} within minutes"
        description = (
            f"Over the last 1 or 5 minutes only {pct} of cited claims of {service} version "
            f"{version} in prod are supported by the passage they cite: at least 5 points below "
            "the service's 1-day level and at least 6 standard errors out (a likelihood ratio "
            "of e^18), on at least 60 cited claims. Check the verdict mix: misattributed means "
            "the right passage was retrieved but the wrong one cited."
        )
    else:
        summary = f"Citation accuracy of {service} {version} (prod) fell to {pct}"
        description = (
            f"Over the last 15 minutes or hour only {pct} of cited claims of {service} version "
            f"{version} in prod are supported by the passage they cite (floor 50%, or at "
            "least 5 points below the service's 1-day level and at least 5 standard errors "
            "out: see the drop and z panels). Check the verdict mix: misattributed means the "
            "right passage was retrieved but the wrong one cited."
        )
    return f"""\
          - exp_labels: {{severity: critical, {where(service, version)}, path: {path}}}
            exp_annotations:
              summary: "{summary}"
              description: "{description}"
              inspect: "{inspect(service, version).replace(chr(92), chr(92) * 2)}"
              why: "{NO_MISATTRIBUTION_WHY}"
              runbook_url: "https://github.com/citemon/citemon/blob/main/grafana/runbooks.md#citationaccuracydrop"
"""


def ids_alert(service: str, version: str, path: str, value: float, shown: str = "") -> str:
    if path == "fast":
        summary = f"{service} {version} (prod) cites {value:.1f} passages per claim within minutes"
        description = (
            f"Cited claims of {service} version {version} in prod name "
            f"{shown or f'{value:.2f}'} passages each over the last 1 or 5 minutes: over 1.5x "
            "the service's 1-day level and at least 6 standard errors out, on at least 60 cited "
            "claims. Citing everything makes citation accuracy look fine while telling the "
            "reader nothing: read the accuracy panel together with this one."
        )
    else:
        summary = f"{service} {version} (prod) cites {value:.1f} passages per claim"
        description = (
            f"Cited claims of {service} version {version} in prod now name "
            f"{shown or f'{value:.2f}'} passages each on average over the last 15 minutes or "
            "hour (alert at 3, or 1.5x the service's 1-day level at least 5 standard errors "
            "out). Citing everything makes citation accuracy look fine while telling the reader "
            "nothing: read the accuracy panel together with this one."
        )
    return f"""\
          - exp_labels: {{severity: warning, {where(service, version)}, path: {path}}}
            exp_annotations:
              summary: "{summary}"
              description: "{description}"
              inspect: "{inspect(service, version).replace(chr(92), chr(92) * 2)}"
              runbook_url: "https://github.com/citemon/citemon/blob/main/grafana/runbooks.md#citationidsperclaimclimbing"
"""


def check(minute: str, alert: str, expected: Sequence[str], why: str) -> str:
    head = f"      # {why}\n      - eval_time: {minute}\n        alertname: {alert}\n"
    if not expected:
        return head + "        exp_alerts: []\n"
    return head + "        exp_alerts:\n" + "".join(expected)


ACC = "CitationAccuracyDrop"
IDS = "CitationIdsPerClaimClimbing"


def expectations() -> str:
    parts = [
        """\
    promql_expr_test:
      # The fast path's windows, two minutes after the deploy: v2 alone, exact.
      - expr: citemon:citation_accuracy:ratio5m{service="severe",version="v2"}
        eval_time: 62m
        exp_samples:
          - labels: >-
              citemon:citation_accuracy:ratio5m{service="severe",version="v2",environment="prod"}
            value: 0.3333333333333333
      - expr: citemon:citation_accuracy:ratio1m{service="severe",version="v2"}
        eval_time: 62m
        exp_samples:
          - labels: >-
              citemon:citation_accuracy:ratio1m{service="severe",version="v2",environment="prod"}
            value: 0.3333333333333333
      # The IDs ratio of a version younger than its window reads a little high (3.44 at 62 m,
      # 3.42 at 63 m): increase() extrapolates each counter on its own. Exact once it is older.
      - expr: round(citemon:ids_per_claim:ratio5m{service="gamer",version!="v1"}, 0.01)
        eval_time: 70m
        exp_samples:
          - labels: '{service="gamer",version="v2''rc1",environment="prod"}'
            value: 3.4

    alert_rule_test:
""",
        check("59m", ACC, [], "An hour of healthy traffic, the noise, the quiet service: nothing."),
        check("59m", IDS, [], "Nor for IDs per claim."),
        check("60m45s", ACC, [], "The blip's wrong scrape, then severe's first claims: pending."),
        check(
            "61m",
            ACC,
            [accuracy_alert("severe", "v2", "slow", "33.33%")],
            "A minute after the deploy severe pages on the slow path's floor (< 0.5, 30 claims)...",
        ),
        check(
            "61m30s",
            ACC,
            [
                accuracy_alert("moderate", "v2", "slow", "66.67%"),
                accuracy_alert("severe", "v2", "fast", "33.33%"),
                accuracy_alert("severe", "v2", "slow", "33.33%"),
            ],
            "...and at 1 min 30 s on the fast path's evidence; moderate (0.90 -> 0.67 at one "
            "claim a second) on the slow path's hour member, its whole life so far.",
        ),
        check(
            "61m45s",
            IDS,
            [
                ids_alert("broad", "v2", "fast", 2.2),
                ids_alert("broad", "v2", "slow", 2.2, shown="2.23"),
                ids_alert("gamer", "v2'rc1", "fast", 3.4),
                ids_alert("gamer", "v2'rc1", "slow", 3.4, shown="3.44"),
            ],
            "Both climbs page both paths within two minutes (the slow one first, on its hour "
            "member; its IDs ratio reads a little high while v2 is younger than the window: "
            "increase() extrapolates each counter on its own).",
        ),
        check(
            "62m",
            ACC,
            [
                accuracy_alert("moderate", "v2", "slow", "66.67%"),
                accuracy_alert("severe", "v2", "fast", "33.33%"),
                accuracy_alert("severe", "v2", "slow", "33.33%"),
                accuracy_alert("tenth", "v2", "slow", "80%"),
            ],
            "tenth (0.90 -> 0.80 at 3 claims a second) pages 2 min 0 s after its deploy (the "
            "limit: about 1.5 minutes of its claims; the target 2x that + 1 min = 3.9 min).",
        ),
        check(
            "62m15s",
            ACC,
            [
                accuracy_alert("moderate", "v2", "fast", "66.67%"),
                accuracy_alert("moderate", "v2", "slow", "66.67%"),
                accuracy_alert("severe", "v2", "fast", "33.33%"),
                accuracy_alert("severe", "v2", "slow", "33.33%"),
                accuracy_alert("tenth", "v2", "slow", "80%"),
            ],
            "moderate's fast path follows (its 5-minute window).",
        ),
        check(
            "67m",
            ACC,
            [
                accuracy_alert("moderate", "v2", "fast", "66.67%"),
                accuracy_alert("moderate", "v2", "slow", "66.67%"),
                accuracy_alert("severe", "v2", "slow", "33.33%"),
                accuracy_alert("tenth", "v2", "fast", "80%"),
                accuracy_alert("tenth", "v2", "slow", "80%"),
            ],
            "Rolled back at 66 m: the fast path resolved within a minute (the 1-minute window).",
        ),
        check(
            "68m",
            ACC,
            [
                accuracy_alert("moderate", "v2", "fast", "66.67%"),
                accuracy_alert("moderate", "v2", "slow", "66.67%"),
                accuracy_alert("tenth", "v2", "fast", "80%"),
                accuracy_alert("tenth", "v2", "slow", "80%"),
            ],
            "The slow path resolves severe when v2 stops serving (no claim for 2 minutes).",
        ),
        check(
            "75m",
            IDS,
            [
                ids_alert("broad", "v2", "fast", 2.2),
                ids_alert("broad", "v2", "slow", 2.2),
                ids_alert("gamer", "v2'rc1", "fast", 3.4),
                ids_alert("gamer", "v2'rc1", "slow", 3.4),
            ],
            "Both paths keep paging both climbs.",
        ),
        check(
            "81m",
            ACC,
            [
                accuracy_alert("moderate", "v2", "slow", "68.22%"),
                accuracy_alert("tenth", "v2", "fast", "80%"),
                accuracy_alert("tenth", "v2", "slow", "80%"),
            ],
            "Moderate fixed in place at 80 m: its fast path resolved within a minute.",
        ),
        check(
            "90m",
            ACC,
            [accuracy_alert("tenth", "v2", "slow", "80%")],
            "Its slow path once the 15-minute window recovered (by 88.5 m); noise (p = 0.85 at 1 "
            "claim/s, p = 0.90 at 3 claims/s) and the dip never paged.",
        ),
    ]
    return "".join(parts)


def render() -> str:
    return HEADER + inputs() + "\n" + expectations()


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
