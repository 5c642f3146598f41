"""The rollout gates' misattribution-pattern report (Argo Rollouts dry-run metrics, a Flagger
template per pattern), checked offline like the accuracy gates: the CRDs' shapes, PromQL that
parses, and on synthetic counters (``promtool test rules`` with the shipped recording rules)
the values that name the pattern a canary makes more often, and nothing for a healthy one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from citemon._core.records import PATTERNS
from tests.rollout_gates import GATES, argo_phase, flagger_check, render_flagger
from tests.unit.test_grafana import RULES, run_promtool

ARGO_PATTERNS = GATES / "argo-patterns-analysistemplate.yaml"
FLAGGER_PATTERNS = GATES / "flagger-patterns-metrictemplate.yaml"
ARGS = {"service": "support-bot", "environment": "prod"}


def _argo() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(ARGO_PATTERNS.read_text())
    return doc


def _render_argo(text: str, args: dict[str, str]) -> str:
    values = {a["name"]: a["value"] for a in _argo()["spec"]["args"] if "value" in a} | args

    def sub(m: re.Match[str]) -> str:
        tag = m.group(1).strip()
        assert tag.startswith("args.") and tag[5:] in values, tag
        return values[tag[5:]]

    return re.sub(r"\{\{([^}]*)\}\}", sub, text)


def _argo_query(metric: dict[str, Any], service: str, canary: str) -> str:
    query: str = metric["provider"]["prometheus"]["query"]
    return _render_argo(query, {**ARGS, "service": service, "canary-version": canary})


def _flagger() -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(FLAGGER_PATTERNS.read_text()) if d]
    return doc


def _flagger_query(service: str, canary: str, pattern: str) -> str:
    variables = {"service": service, "environment": "prod", "canary_version": canary,
                 "pattern": pattern}  # fmt: skip
    return render_flagger(_flagger()["spec"]["query"], variables)


def test_one_dry_run_metric_per_pattern() -> None:
    doc = _argo()
    assert (doc["apiVersion"], doc["kind"]) == ("argoproj.io/v1alpha1", "AnalysisTemplate")
    assert set(doc["spec"]) == {"args", "metrics", "dryRun"}
    names = [m["name"] for m in doc["spec"]["metrics"]]
    assert names == [f"{p.replace('_', '-')}-rose" for p in PATTERNS]
    # Every one reported, none deciding.
    assert [d["metricName"] for d in doc["spec"]["dryRun"]] == names
    args = {a["name"] for a in doc["spec"]["args"]}
    for metric, pattern in zip(doc["spec"]["metrics"], PATTERNS, strict=True):
        used = set(re.findall(r"\{\{\s*args\.([\w-]+)\s*\}\}", yaml.safe_dump(metric)))
        assert used <= args
        assert f'pattern="{pattern}"' in metric["provider"]["prometheus"]["query"]
    flagger = _flagger()
    assert (flagger["apiVersion"], flagger["kind"]) == ("flagger.app/v1beta1", "MetricTemplate")
    assert set(flagger["spec"]) == {"provider", "query"}


def test_argo_and_flagger_ask_the_same_question() -> None:
    for metric, pattern in zip(_argo()["spec"]["metrics"], PATTERNS, strict=True):
        assert _argo_query(metric, "support-bot", "v2") == _flagger_query(
            "support-bot", "v2", pattern
        )


def test_pattern_queries_pass_promtool_check(tmp_path: Path) -> None:
    queries = [_argo_query(m, "support-bot", "v2") for m in _argo()["spec"]["metrics"]]
    rules = {"groups": [{"name": "gates", "rules": [
        {"record": f"gate_{i}", "expr": q} for i, q in enumerate(queries)
    ]}]}  # fmt: skip
    path = tmp_path / "gates.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    assert f"SUCCESS: {len(PATTERNS)} rules found" in run_promtool("check", "rules", path)


# Two services, each a stable v1 (10 cited claims a minute: 9 correct, 1 misattributed as
# `other`) for an hour and a canary v2 from 30 m (10 a minute): "bad" misattributes 4 of them
# as first_retrieved (the demo's v2), "fine" 1 as `other` like its stable version.
def _series(service: str, version: str, start: int, counts: dict[str, int]) -> list[dict[str, str]]:
    lead = "_x30 " if start else ""
    n = 60 - start
    out = []
    for verdict, per_min in (
        ("correct", 10 - sum(counts.values())),
        ("misattributed", sum(counts.values())),
    ):
        out.append({
            "series": f'citemon_claims_total{{service="{service}",version="{version}",'
            f'environment="prod",verdict="{verdict}",instance="m-0",job="citemon"}}',
            "values": f"{lead}0+{per_min}x{n}",
        })  # fmt: skip
    for pattern in PATTERNS:
        out.append({
            "series": f'citemon_misattributions_total{{service="{service}",version="{version}",'
            f'environment="prod",pattern="{pattern}",instance="m-0",job="citemon"}}',
            "values": f"{lead}0+{counts.get(pattern, 0)}x{n}",
        })  # fmt: skip
    return out


def test_the_pattern_a_canary_makes_more_often_is_named(tmp_path: Path) -> None:
    series = [
        *_series("bad", "v1", 0, {"other": 1}),
        *_series("bad", "v2", 30, {"first_retrieved": 4}),
        *_series("fine", "v1", 0, {"other": 1}),
        *_series("fine", "v2", 30, {"other": 1}),
    ]
    # At 50 m: 150 cited claims each side; bad v2's first_retrieved rate 0.4 against 0.
    want = {("bad", p): (0.4 if p == "first_retrieved" else 0.0) for p in PATTERNS}
    want |= {("fine", p): 0.0 for p in PATTERNS}
    checks = []
    for (service, pattern), value in want.items():
        metric = _argo()["spec"]["metrics"][PATTERNS.index(pattern)]
        checks.append({
            "expr": f"round({_argo_query(metric, service, 'v2')}, 0.0001)",
            "eval_time": "50m",
            "exp_samples": [{"labels": "{" + f'environment="prod", pattern="{pattern}", '
                             f'service="{service}", version="v2"' + "}", "value": value}],
        })  # fmt: skip
    # Before the canary has 100 cited claims (10 minutes in): no value, so Inconclusive.
    checks.append({
        "expr": _argo_query(_argo()["spec"]["metrics"][1], "bad", "v2"),
        "eval_time": "38m",
        "exp_samples": [],
    })  # fmt: skip
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": checks}],
    }
    path = tmp_path / "pattern_gates_test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    assert "SUCCESS" in run_promtool("test", "rules", path)

    metrics = _argo()["spec"]["metrics"]
    phases = {
        (service, p): argo_phase(metrics[PATTERNS.index(p)], [v])
        for (service, p), v in want.items()
    }
    assert {k for k, v in phases.items() if v == "Failed"} == {("bad", "first_retrieved")}
    assert {v for k, v in phases.items() if k != ("bad", "first_retrieved")} == {"Successful"}
    assert argo_phase(metrics[1], []) == "Inconclusive"
    # Flagger: recorded without gating ({min: -1, max: 1}), or halting on a rise ({max: 0}).
    assert flagger_check([0.4], {"min": -1, "max": 1}) == "pass"
    assert flagger_check([0.4], {"max": 0}) == "fail"
    assert flagger_check([0.0], {"max": 0}) == "pass"
