"""The alert rules, their promtool unit tests and the dashboard, checked with the real promtool.

Every PromQL expression in the dashboard is wrapped as a recording rule and parsed by
``promtool check rules``; every ``citemon_*`` name in the dashboard and the rules must be either a
series the monitor's registry really exports or a recording rule defined in the rules file.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from citemon._core.calibration import Calibration
from citemon._core.records import AnswerScore, ClaimResult
from citemon._metrics import Metrics
from citemon._otlp.assembly import TraceAssembler
from tests.conftest import REPO, need_server

GRAFANA = REPO / "grafana"
RULES = GRAFANA / "rules" / "citemon.rules.yml"
DASHBOARD = GRAFANA / "dashboards" / "citemon.json"
ALERTS = (
    "CitationAccuracyDrop",
    "CitationIdsPerClaimClimbing",
    "CitationCoverageDrop",
    "CitationJudgeFailing",
    "CitationMonitorLagging",
    "CitationMonitorDown",
)
QUALITY_ALERTS = ALERTS[:3]

# Values Grafana would substitute for its variables; any valid value serves for parsing.
GRAFANA_VARS = {
    "service": "support-bot",
    "environment": "prod",
    "version": "v1",
    "datasource": "prometheus",
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "1h",
}
_VAR = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")
_NAME = re.compile(r"\bcitemon[_:][a-zA-Z0-9_:]*")


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        need_server("promtool", "install Debian's prometheus package (`make tools`)")
        raise AssertionError  # unreachable: need_server fails or skips
    return path


def run_promtool(*args: str | Path, cwd: Path | None = None) -> str:
    proc = subprocess.run(
        [promtool(), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def rules_doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(RULES.read_text())
    return doc


def all_rules() -> list[dict[str, Any]]:
    return [rule for group in rules_doc()["groups"] for rule in group["rules"]]


def dashboard_exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from dashboard_exprs(value)
    elif isinstance(node, list):
        for value in node:
            yield from dashboard_exprs(value)


def substitute(expr: str) -> str:
    return _VAR.sub(lambda m: GRAFANA_VARS[m.group(1) or m.group(2)], expr)


def exported_names() -> set[str]:
    """Series names a monitor with one scored answer (and every other method called, and a
    judge calibration loaded) exports."""
    reg = CollectorRegistry()
    m = Metrics(reg, calibration=Calibration(judge="lexical", tp=9, fn=1, tn=7, fp=3))
    m.record_answer(
        AnswerScore(
            service="s",
            version="v",
            environment="e",
            trace_id="ab" * 16,
            claims=[ClaimResult(sentence=0, text="t", cited_ids=["p"], verdict="correct")],
        )
    )
    m.span("answer")
    m.dead_letter("not_protobuf")
    m.consumer_lag("otlp_spans", 0, 1)
    m.set_corrected_accuracy(service="s", version="v", environment="e", value=0.5)
    m.set_probe_sensitivity(0.9)
    m.watch_traces(TraceAssembler().outcomes)
    m.judge.set_limit(4)
    m.judge.request_done("ok", 0.1)
    names = set()
    for line in generate_latest(reg).decode().splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_rules_pass_promtool_check() -> None:
    out = run_promtool("check", "rules", RULES)
    assert f"SUCCESS: {len(all_rules())} rules found" in out


PROMTOOL_TESTS = sorted(p.name for p in (GRAFANA / "rules" / "tests").glob("*.yml"))


def test_every_promtool_test_file_is_run() -> None:
    assert set(PROMTOOL_TESTS) >= {
        "detection_test.yml",
        "fast_burn_test.yml",
        "monitor_test.yml",
        "quality_test.yml",
    }


@pytest.fixture(scope="module")
def promtool_tests() -> Iterator[dict[str, subprocess.Popen[str]]]:
    """Every rules test file's ``promtool test rules``, all started at once (each is one
    evaluation thread: side by side they take the longest one's time, not the sum)."""
    runs = {
        name: subprocess.Popen(
            [promtool(), "test", "rules", str(GRAFANA / "rules" / "tests" / name)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name in PROMTOOL_TESTS
    }
    try:
        yield runs
    finally:
        for run in runs.values():
            if run.poll() is None:
                run.kill()
            run.communicate()


@pytest.mark.parametrize("name", PROMTOOL_TESTS)
def test_rules_unit_tests_pass(name: str, promtool_tests: dict[str, subprocess.Popen[str]]) -> None:
    out, _ = promtool_tests[name].communicate(timeout=300)
    assert promtool_tests[name].returncode == 0, out
    assert out.count("SUCCESS") == 1, out


def alert_rules() -> list[dict[str, Any]]:
    return [r for r in all_rules() if "alert" in r]


def firing_paths() -> set[tuple[str, str]]:
    """(alertname, path) of every alert some promtool test expects firing."""
    found = set()
    for path in (GRAFANA / "rules" / "tests").glob("*.yml"):
        for test in yaml.safe_load(path.read_text())["tests"]:
            for check in test.get("alert_rule_test", []):
                for alert in check.get("exp_alerts") or []:
                    found.add((check["alertname"], alert["exp_labels"].get("path", "")))
    return found


def test_every_alert_exists_is_guarded_annotated_and_tested() -> None:
    rules = alert_rules()
    alerts = {r["alert"]: r for r in rules}
    assert set(alerts) == set(ALERTS)
    tests_text = "".join(p.read_text() for p in (GRAFANA / "rules" / "tests").glob("*.yml"))
    runbooks = (GRAFANA / "runbooks.md").read_text()
    for rule in rules:
        name = rule["alert"]
        assert rule["for"], name
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        notes = rule["annotations"]
        assert {"summary", "description", "runbook_url"} <= set(notes), name
        anchor = notes["runbook_url"].rsplit("#", 1)[1]
        assert anchor == name.lower() and f"\n## {name}\n" in runbooks, name
        # Each alert is asserted firing (with its labels) and quiet in the promtool tests.
        assert f"alertname: {name}\n        exp_alerts: []" in tests_text, name
        assert re.search(
            rf"alertname: {name}\n        exp_alerts:\n          - exp_labels", tests_text
        )
        if name in QUALITY_ALERTS:
            path = rule["labels"]["path"]
            # Every path of every quality alert is asserted firing, by its `path` label.
            assert (name, path) in firing_paths(), (name, path)
            expr = rule["expr"]
            assert "and on (service, version, environment)" in expr, name  # the sample guard
            guard = int(re.findall(r">= (\d+)\s*$", expr)[0])
            assert guard == {"slow": 30, "fast": 60}[path], (name, path)
    # The judge alert is guarded by a minimum number of requests, not only an error ratio.
    judge = alerts["CitationJudgeFailing"]["expr"]
    assert re.search(
        r"\band on \(job, namespace\)\s+citemon_job:judge_requests:\S+ \* 300 >= 20\b", judge
    )


def test_accuracy_and_ids_alerts_have_a_fast_and_a_slow_path() -> None:
    """The family of windows (issue #24): a fast path on the 1m and 5m windows (>= 60 claims),
    a slow path on the 15m and 1h windows (>= 30 claims, still serving), both `for: 30s`; each
    member pages on its evidence (z >= 6 fast, 5.5 over 15 minutes, 4.5 over the hour) with the
    minimum effect in its window and in the next shorter one."""
    paths: dict[str, dict[str, dict[str, Any]]] = {}
    for rule in alert_rules():
        if rule["alert"] in QUALITY_ALERTS:
            paths.setdefault(rule["alert"], {})[rule["labels"]["path"]] = rule
    assert {n: set(p) for n, p in paths.items()} == {
        "CitationAccuracyDrop": {"fast", "slow"},
        "CitationIdsPerClaimClimbing": {"fast", "slow"},
        "CitationCoverageDrop": {"slow"},
    }
    for name in ("CitationAccuracyDrop", "CitationIdsPerClaimClimbing"):
        fast, slow = paths[name]["fast"], paths[name]["slow"]
        assert (fast["for"], slow["for"]) == ("30s", "30s"), name
        assert fast["labels"]["severity"] == slow["labels"]["severity"], name
        assert set(re.findall(r"ratio(\d+[mh])\b", fast["expr"])) == {"5m", "1m"}, name
        assert set(re.findall(r"ratio(\d+[mh])\b", slow["expr"])) == {"1h", "15m", "5m"}, name
        metric = (
            "citation_accuracy_drop" if name == "CitationAccuracyDrop" else "ids_per_claim_climb"
        )
        fast_z = set(re.findall(rf"citemon:{metric}:z(\w+) >= ([\d.]+)", fast["expr"]))
        slow_z = set(re.findall(rf"citemon:{metric}:z(\w+) >= ([\d.]+)", slow["expr"]))
        assert (fast_z, slow_z) == ({("1m", "6"), ("5m", "6")}, {("15m", "5.5"), ("1h", "4.5")})
    coverage = paths["CitationCoverageDrop"]["slow"]["expr"]
    assert set(re.findall(r"citemon:citation_coverage_drop:z(\w+) >= ([\d.]+)", coverage)) == {
        ("15m", "5.5"),
        ("1h", "4.5"),
    }
    accuracy_fast = " ".join(paths["CitationAccuracyDrop"]["fast"]["expr"].split())
    accuracy_slow = " ".join(paths["CitationAccuracyDrop"]["slow"]["expr"].split())
    for term in ("citemon:citation_accuracy_drop:ratio1m >= 0.05",
                 "citemon:citation_accuracy_drop:ratio5m >= 0.05",
                 "citemon:cited_claims:increase1m >= 60"):  # fmt: skip
        assert term in accuracy_fast, term
    for term in ("citemon:citation_accuracy_drop:ratio15m >= 0.05",
                 "citemon:citation_accuracy_drop:ratio5m >= 0.05",
                 "citemon:citation_accuracy_drop:ratio1h >= 0.05",
                 "citemon:citation_accuracy:ratio15m < 0.5",
                 "citemon:cited_claims:increase15m >= 30",
                 "(increase(citemon_claims_total[2m])) > 0"):  # fmt: skip
        assert term in accuracy_slow, term
    # The value an annotation shows is the accuracy, not the drop or z.
    assert accuracy_fast.startswith("( citemon:citation_accuracy:ratio1m and on")
    assert accuracy_slow.startswith("( citemon:citation_accuracy:ratio15m and on")


# The line agreed with `citemon inspect` (README, grafana/runbooks.md): labels single-quoted for a
# shell, a quote inside a label closed, escaped and reopened ('\'').
_QUOTED = "'{{{{ reReplaceAll \"'\" \"'\\\\''\" $labels.{} }}}}'"
INSPECT_LINE = (
    f"citemon inspect --service {_QUOTED.format('service')} --version {_QUOTED.format('version')}"
    f" --environment {_QUOTED.format('environment')} --since 30m"
)


def test_quality_alerts_print_the_agreed_inspect_line() -> None:
    for rule in alert_rules():
        if rule["alert"] in QUALITY_ALERTS:
            extra = " --verdict uncited" if rule["alert"] == "CitationCoverageDrop" else ""
            assert rule["annotations"]["inspect"] == INSPECT_LINE + extra, rule["alert"]
        else:
            assert "inspect" not in rule["annotations"], rule["alert"]


@pytest.mark.parametrize("name", ["fast_burn", "detection"])
def test_generated_promtool_tests_are_current(name: str) -> None:
    """grafana/rules/tests/<name>_test.yml is what its generator writes (no hand drift)."""
    import importlib.util

    path = REPO / "scripts" / f"gen_{name}_test.py"
    spec = importlib.util.spec_from_file_location(f"gen_{name}_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (GRAFANA / "rules" / "tests" / f"{name}_test.yml").read_text() == module.render()


def test_alert_names_are_the_design_pages() -> None:
    """ALERTS above is the design page's table (docs/design.md), not a copy that drifted."""
    from tests.unit.test_deploy import design_table_names

    assert design_table_names("Alerts and the detection limit") == ALERTS


def test_dashboard_shape() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["schemaVersion"] >= 39
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert set(variables) >= {"datasource", "service", "environment", "version"}
    assert variables["datasource"]["type"] == "datasource"
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    titles = " | ".join(p["title"] for p in panels).lower()
    for words in (
        "accuracy",
        "coverage",
        "faithfulness",
        "ids per",
        "verdict mix",
        "over-broad",
        "comparison",
        "latency",
        "errors",
        "in flight vs cap",
        "cache",
        "lag",
        "sampling",
    ):
        assert words in titles, words
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    # Panels link to traces: some queries ask for exemplars.
    assert any(t.get("exemplar") for p in panels for t in p.get("targets", []))
    # Deploys are annotated from the monitored service's version label, not citemon's own.
    deploys = [a for a in dash["annotations"]["list"] if "expr" in a]
    assert deploys and "citemon_answers_total" in deploys[0]["expr"]
    assert "build_info" not in deploys[0]["expr"]


def test_every_dashboard_expr_parses(tmp_path: Path) -> None:
    exprs = list(dashboard_exprs(json.loads(DASHBOARD.read_text())))
    assert len(exprs) >= 20
    wrapped = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard_expr_{i}", "expr": substitute(e)}
                    for i, e in enumerate(exprs)
                ],
            }
        ]
    }
    for rule in wrapped["groups"][0]["rules"]:
        assert "$" not in rule["expr"], rule["expr"]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text(yaml.safe_dump(wrapped))
    out = run_promtool("check", "rules", path)
    assert f"SUCCESS: {len(exprs)} rules found" in out


def test_broken_expr_is_caught(tmp_path: Path) -> None:
    """The wrap-and-check above can fail: a typo'd expression is rejected."""
    path = tmp_path / "bad.rules.yml"
    bad = {"groups": [{"name": "x", "rules": [{"record": "x", "expr": "sum(rate(citemon_x[5m])"}]}]}
    path.write_text(yaml.safe_dump(bad))
    proc = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True)
    assert proc.returncode != 0


def test_every_metric_name_is_exported_or_recorded() -> None:
    exported = exported_names()
    recorded = {r["record"] for r in all_rules() if "record" in r}
    texts = [*dashboard_exprs(json.loads(DASHBOARD.read_text()))]
    texts += [r["expr"] for r in all_rules()]
    dash = json.loads(DASHBOARD.read_text())
    texts += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    used = {name for text in texts for name in _NAME.findall(text)}
    assert len(used) >= 15
    unknown = {n for n in used if n not in exported and n not in recorded}
    assert not unknown, (
        f"names neither exported by citemon._metrics.definitions nor recorded: {unknown}"
    )
    # And the rules only build on what the monitor exports (no recording rule reads another
    # rule's output before it is defined).
    seen: set[str] = set()
    for group in rules_doc()["groups"]:
        for rule in group["rules"]:
            for name in _NAME.findall(rule["expr"]):
                if ":" in name:
                    assert name in seen, f"{name} used before it is recorded"
            if "record" in rule:
                seen.add(rule["record"])


@pytest.mark.parametrize("name", ["citemon_answers_total", "citemon_judge_request_seconds_bucket"])
def test_name_check_sees_suffixed_series(name: str) -> None:
    assert name in exported_names()


def test_the_pipeline_row_shows_trace_outcomes_and_unjudged_causes() -> None:
    dash = json.loads(DASHBOARD.read_text())
    rows = [p for p in dash["panels"] if p["type"] == "row"]
    pipeline_y = next(r["gridPos"]["y"] for r in rows if r["title"] == "Pipeline")
    assert pipeline_y == max(r["gridPos"]["y"] for r in rows)  # the last row: all below it
    below = {
        p["title"]: [t["expr"] for t in p["targets"]]
        for p in dash["panels"]
        if p["type"] != "row" and p["gridPos"]["y"] > pipeline_y
    }
    assert below["Multi-span traces by assembler outcome"] == [
        "sum by (outcome) (rate(citemon_traces_total[$__rate_interval]))"
    ]
    assert below["Unjudged claims by cause, and judge calls cut"] == [
        "sum by (cause) (rate(citemon_unjudged_claims_total[$__rate_interval]))",
        "sum(rate(citemon_judge_calls_cut_total[$__rate_interval]))",
    ]
