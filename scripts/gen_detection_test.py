"""Write grafana/rules/tests/detection_test.yml: time to page at 0.3, 3 and 30 cited claims/s.

    .venv/bin/python scripts/gen_detection_test.py

(tests/unit/test_grafana.py checks that the file is what this writes.)

One service per case, all in one test group: a day's worth of claims at 0.90 (version v0,
whose counters jump once and then hold: the day's baseline), v1 at 0.90 for 5 minutes, then
the deploy: v2 takes all traffic, its series born at the first scrape after it (as the monitor
creates a version's series on its first answer). Every claim is drawn on its own (seeded);
scrapes and evaluations every 15 s. The expectations below are hand-written: the minute of the
first page per path, read from the ALERTS series, against the target of issue #24 (2x the
statistical limit plus a minute; ``python -m bench detection_curve`` prints the limit, the
CUSUM oracle's average time for the rate and drop).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import NamedTuple

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # bench/, without installing
from bench._promtool_series import claims_labels, counter  # noqa: E402 (path set above)

OUT = Path(__file__).resolve().parent.parent / "grafana" / "rules" / "tests" / "detection_test.yml"
STEP_S = 15
HISTORY_MIN = 5
WATCH_MIN = 30
BASE = 0.9


class Case(NamedTuple):
    name: str
    rate: float  # cited claims a second
    accuracy: float  # v2's
    seed: int
    pages: dict[str, float]  # path -> minutes from the deploy to the first firing
    why: str


CASES = (
    Case(
        "tenth-r0.3",
        0.3,
        0.80,
        1,
        {"slow": 11.75},
        "0.90 -> 0.80 at 0.3 cited claims a second: limit 11.6 min, target 24.2 min",
    ),
    Case(
        "tenth-r3",
        3,
        0.80,
        2,
        {"fast": 2.25, "slow": 1.75},
        "0.90 -> 0.80 at 3 a second: limit 1.45 min, target 3.9 min",
    ),
    Case(
        "tenth-r30",
        30,
        0.80,
        3,
        {"fast": 1.25, "slow": 1.0},
        "0.90 -> 0.80 at 30 a second: limit 0.17 min, target 1.35 min",
    ),
    Case(
        "fifth-r0.3",
        0.3,
        0.70,
        4,
        {"fast": 5.75, "slow": 4.5},
        "0.90 -> 0.70 at 0.3 a second: limit 3.8 min, target 8.6 min",
    ),
    Case(
        "fifth-r3",
        3,
        0.70,
        5,
        {"fast": 1.5, "slow": 1.0},
        "0.90 -> 0.70 at 3 a second: limit 0.46 min, target 1.9 min",
    ),
    Case(
        "fifth-r30",
        30,
        0.70,
        6,
        {"fast": 1.0, "slow": 1.0},
        "0.90 -> 0.70 at 30 a second: limit 0.05 min, target 1.1 min",
    ),
    Case(
        "severe-r3",
        3,
        0.33,
        7,
        {"fast": 1.0, "slow": 1.0},
        "0.90 -> 0.33 at 3 a second: target 1.5 min",
    ),
    Case(
        "same-r0.3",
        0.3,
        0.90,
        8,
        {},
        "a new version that has not regressed, 0.3 a second: no page in its first 30 min",
    ),
    Case(
        "same-r3",
        3,
        0.90,
        9,
        {},
        "a new version that has not regressed, 3 a second: no page in its first 30 min",
    ),
    Case(
        "same-r30",
        30,
        0.90,
        10,
        {},
        "a new version that has not regressed, 30 a second: no page in its first 30 min",
    ),
)


def series(service: str, version: str, verdict: str, increments: list[int | None]) -> str:
    labels = claims_labels(service, version, verdict)
    return (
        f"      - series: 'citemon_claims_total{{{labels}}}'\n"
        f"        values: '{counter(increments)}'\n"
    )


def inputs(case: Case) -> str:
    rng = random.Random(case.seed)
    deploy = HISTORY_MIN * 60 // STEP_S
    samples = (HISTORY_MIN + WATCH_MIN) * 60 // STEP_S + 1
    per = [int(case.rate * STEP_S * (i + 1)) - int(case.rate * STEP_S * i) for i in range(samples)]
    per[0] = 0
    good = []
    for i, n in enumerate(per):
        p = BASE if i <= deploy else case.accuracy
        good.append(sum(rng.random() < p for _ in range(n)))
    day = round(case.rate * 86400)
    day_good = round(day * BASE)
    rest = [0] * (samples - 2)
    out = series(case.name, "v0", "correct", [0, day_good, *rest])
    out += series(case.name, "v0", "misattributed", [0, day - day_good, *rest])
    for verdict in ("correct", "misattributed"):
        count = good if verdict == "correct" else [n - g for n, g in zip(per, good, strict=True)]
        out += series(
            case.name, "v1", verdict, [c if i <= deploy else None for i, c in enumerate(count)]
        )
        out += series(
            case.name, "v2", verdict, [c if i > deploy else None for i, c in enumerate(count)]
        )
    return out


def checks(case: Case) -> str:
    end = HISTORY_MIN + WATCH_MIN
    firing = f'ALERTS{{alertstate="firing",service="{case.name}",version="v2"}}'
    first = (
        f"(min by (alertname, path) (min_over_time(timestamp({firing})[{WATCH_MIN}m:15s]))"
        f" - {HISTORY_MIN * 60}) / 60"
    )
    expected = "".join(
        f'          - labels: \'{{alertname="CitationAccuracyDrop", path="{path}"}}\'\n'
        f"            value: {minutes}\n"
        for path, minutes in sorted(case.pages.items())
    )
    return f"""\
      # {case.name}: {case.why}: the minutes from the deploy to v2's first page per path (any
      # quality alert; '[]': none in the {WATCH_MIN} minutes watched).
      - expr: {first}
        eval_time: {end}m
        exp_samples:{" []" if not expected else ""}
{expected}\
      - expr: count_over_time(ALERTS{{service="{case.name}",version="v1"}}[{end}m:15s])
        eval_time: {end}m
        exp_samples: []
"""


HEADER = """\
# promtool unit tests: time to page against the statistical limit (issue #24), one service a case.
# v1 (healthy) never pages either.
# GENERATED by scripts/gen_detection_test.py (the counters); edit the expectations there.
rule_files:
  - ../citemon.rules.yml

evaluation_interval: 15s

tests:
"""


def render() -> str:
    body = "".join(inputs(c) for c in CASES)
    tests = "".join(checks(c) for c in CASES)
    return (
        HEADER + "  - interval: 15s\n    input_series:\n" + body + "    promql_expr_test:\n" + tests
    )


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
