"""The deploy manifests, checked statically (Docker and Kubernetes cannot run here).

Every file parses; ports (9464 metrics, 9092 Kafka), the topic, the consumer group, env var names
and metric names agree with the design page (docs/design.md) and the code; the PrometheusRule is
the rules file.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, generate_latest

from citemon._core.records import AnswerScore, ClaimResult
from citemon._metrics import DEFAULT_METRICS_PORT, Metrics
from citemon._otlp.assembly import TraceAssembler
from citemon._service.settings import Settings
from tests.conftest import REPO, need_server

DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
RULES = REPO / "grafana" / "rules" / "citemon.rules.yml"
DESIGN_PAGE = REPO / "docs" / "design.md"

# The design page's metric table (name → type), checked against the page and the registry.
CONTRACT_METRICS = {
    "citemon_answers_total": "counter",
    "citemon_claims_total": "counter",
    "citemon_faithful_claims_total": "counter",
    "citemon_cited_ids_total": "counter",
    "citemon_irrelevant_citations_total": "counter",
    "citemon_overlap_misattributions_total": "counter",
    "citemon_quote_mismatches_total": "counter",
    "citemon_citation_accuracy": "gauge",
    "citemon_citation_coverage": "gauge",
    "citemon_faithfulness": "gauge",
    "citemon_ids_per_claim": "gauge",
    "citemon_judge_requests_total": "counter",
    "citemon_judge_request_seconds": "histogram",
    "citemon_judge_inflight": "gauge",
    "citemon_spans_total": "counter",
    "citemon_dead_letters_total": "counter",
    "citemon_traces_total": "counter",
    "citemon_evaluation_events_total": "counter",
    "citemon_misattributions_total": "counter",
    "citemon_passage_lookups_total": "counter",
    "citemon_passage_lookup_seconds": "histogram",
    "citemon_consumer_lag": "gauge",
    "citemon_held_traces": "gauge",
    "citemon_held_bytes": "gauge",
    "citemon_held_oldest_age_seconds": "gauge",
    "citemon_build_info": "gauge",
}
QUALITY = ("service", "version", "environment")
CONTRACT_LABELS = {
    "citemon_answers_total": {*QUALITY},
    "citemon_claims_total": {*QUALITY, "verdict"},
    "citemon_citation_accuracy": {*QUALITY},
    "citemon_judge_requests_total": {"outcome"},
    "citemon_spans_total": {"outcome"},
    "citemon_dead_letters_total": {"reason"},
    "citemon_evaluation_events_total": {"outcome"},
    "citemon_misattributions_total": {*QUALITY, "pattern"},
    "citemon_quote_mismatches_total": {*QUALITY},
    "citemon_passage_lookups_total": {"outcome"},
    "citemon_consumer_lag": {"topic", "partition"},
    "citemon_build_info": {"version"},
}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def all_yaml() -> list[Path]:
    return sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = load(DEPLOY / "compose.yaml")
    return doc


def k8s(kind: str) -> dict[str, Any]:
    docs = [d for p in K8S.glob("*.yaml") for d in yaml.safe_load_all(p.read_text()) if d]
    found = [d for d in docs if d.get("kind") == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def registry_text() -> str:
    reg = CollectorRegistry()
    m = Metrics(reg)
    m.record_answer(
        AnswerScore(
            service="s",
            version="v",
            environment="e",
            claims=[ClaimResult(sentence=0, text="t", cited_ids=["p"], verdict="correct")],
        )
    )
    m.span("answer")
    m.dead_letter("x")
    m.consumer_lag("otlp_spans", 0, 1)
    m.watch_traces(TraceAssembler().outcomes)  # as the pipeline does
    return generate_latest(reg).decode()


def test_every_file_parses() -> None:
    files = all_yaml()
    names = {p.relative_to(DEPLOY).as_posix() for p in files}
    assert {"compose.yaml", "prometheus.yml", "kubernetes/deployment.yaml"} <= names
    for path in files:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert docs and all(isinstance(d, dict) for d in docs), path


def test_compose_stack() -> None:
    services = compose()["services"]
    assert {"kafka", "otel-collector", "citemon", "prometheus", "grafana"} <= set(services)
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert "controller" in env["KAFKA_PROCESS_ROLES"]  # KRaft, no ZooKeeper
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    init = " ".join(services["kafka-init"]["command"])
    assert "--topic otlp_spans " in init and "--topic otlp_spans.dlq " in init

    collector = services["otel-collector"]
    assert collector["image"].startswith("otel/opentelemetry-collector-contrib:")
    assert "./otel-collector.yaml:/etc/otelcol-contrib/config.yaml:ro" in collector["volumes"]

    citemon = services["citemon"]
    assert (DEPLOY / citemon["build"]["context"] / citemon["build"]["dockerfile"]).is_file()
    cenv = citemon["environment"]
    assert cenv["CITEMON_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert cenv["CITEMON_TOPIC"] == "otlp_spans"
    assert cenv["CITEMON_GROUP"] == "citemon"
    assert int(cenv["CITEMON_METRICS_PORT"]) == DEFAULT_METRICS_PORT == 9464
    assert f"{DEFAULT_METRICS_PORT}:{DEFAULT_METRICS_PORT}" in citemon["ports"]
    assert cenv["CITEMON_JUDGE_API_KEY"] == "${CITEMON_JUDGE_API_KEY:-}"  # passed through only
    grace = int(citemon["stop_grace_period"].rstrip("s"))
    assert grace > float(cenv["CITEMON_DRAIN_TIMEOUT_S"])

    prom = services["prometheus"]
    assert "--enable-feature=exemplar-storage" in prom["command"]
    assert "../grafana/rules:/etc/prometheus/rules:ro" in prom["volumes"]
    grafana = services["grafana"]
    mounts = " ".join(grafana["volumes"])
    assert "../grafana/provisioning/datasources:" in mounts
    assert "../grafana/dashboards:/var/lib/grafana/dashboards/citemon" in mounts
    # Every bind-mount source exists (relative to deploy/, as compose resolves it).
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{volume}: {source} does not exist"


def test_grafana_provisioning_points_where_compose_mounts() -> None:
    grafana = REPO / "grafana" / "provisioning"
    dashboards = load(grafana / "dashboards" / "citemon.yml")["providers"][0]["options"]["path"]
    mounts = compose()["services"]["grafana"]["volumes"]
    assert any(m.split(":")[1] == dashboards for m in mounts)
    (source,) = load(grafana / "datasources" / "citemon.yml")["datasources"]
    assert source["type"] == "prometheus" and source["uid"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert "prometheus" in compose()["services"]
    (dest,) = source["jsonData"]["exemplarTraceIdDestinations"]
    assert dest["name"] == "trace_id"  # the exemplar label citemon._metrics.definitions writes


def test_collector_writes_what_the_monitor_reads() -> None:
    kafka = load(DEPLOY / "otel-collector.yaml")["exporters"]["kafka"]
    traces = kafka.get("traces", kafka)
    assert traces["topic"] == "otlp_spans"
    assert traces["encoding"] == "otlp_proto"
    brokers = " ".join(kafka["brokers"])
    env = compose()["services"]["otel-collector"].get("environment", {})
    for var in re.findall(r"\$\{env:(\w+)", brokers):
        assert env.get(var) == "kafka:9092", var


def test_prometheus_config_scrapes_citemon(tmp_path: Path) -> None:
    config = load(DEPLOY / "prometheus.yml")
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "citemon"]
    assert job["honor_labels"] is True
    assert job["static_configs"][0]["targets"] == [f"citemon:{DEFAULT_METRICS_PORT}"]
    assert config["rule_files"] == ["/etc/prometheus/rules/citemon.rules.yml"]
    # promtool checks the config and its rule files; point it at the repo's copy of the rules.
    promtool = shutil.which("promtool")
    if promtool is None:
        need_server("promtool", "install Debian's prometheus package (`make tools`)")
        return
    config["rule_files"] = [str(RULES)]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_dockerfile() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert f"EXPOSE {DEFAULT_METRICS_PORT}" in text
    assert 'ENTRYPOINT ["citemon"]' in text and 'CMD ["run"]' in text
    assert "/healthz" in text
    for copied in re.findall(r"^COPY (?!--)(\S+)", text, re.M):
        assert (REPO / copied).exists(), copied


def test_kubernetes_deployment() -> None:
    config = k8s("ConfigMap")["data"]
    assert config["CITEMON_TOPIC"] == "otlp_spans"
    assert config["CITEMON_GROUP"] == "citemon"
    assert int(config["CITEMON_METRICS_PORT"]) == DEFAULT_METRICS_PORT
    assert not any("KEY" in k or "PASSWORD" in k for k in config)  # secrets live in a Secret

    dep = k8s("Deployment")
    assert dep["spec"]["replicas"] >= 2
    pod = dep["spec"]["template"]
    assert pod["metadata"]["labels"].items() >= dep["spec"]["selector"]["matchLabels"].items()
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": DEFAULT_METRICS_PORT}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    drain_s = float(config["CITEMON_DRAIN_TIMEOUT_S"])
    assert pod["spec"]["terminationGracePeriodSeconds"] > drain_s
    assert container["envFrom"] == [
        {"configMapRef": {"name": k8s("ConfigMap")["metadata"]["name"]}}
    ]
    (key,) = [e for e in container["env"] if e["name"] == "CITEMON_JUDGE_API_KEY"]
    assert set(key["valueFrom"]["secretKeyRef"]) == {"name", "key"}

    svc = k8s("Service")
    assert svc["metadata"]["name"] == "citemon"  # becomes job="citemon", which the rules use
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (port,) = svc["spec"]["ports"]
    assert port["port"] == DEFAULT_METRICS_PORT and port["targetPort"] == "metrics"

    monitor = k8s("ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"] and endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True

    kustomization = load(K8S / "kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(
        p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"
    )


def test_prometheus_rule_is_the_rules_file() -> None:
    rule = k8s("PrometheusRule")
    assert rule["spec"]["groups"] == load(RULES)["groups"], (
        "deploy/kubernetes/prometheusrule.yaml drifted: run python3 deploy/kubernetes/sync_rules.py"
    )


def test_env_var_names_are_settings() -> None:
    """Every CITEMON_* variable the manifests set is one the monitor reads."""
    names = set(compose()["services"]["citemon"]["environment"]) | set(k8s("ConfigMap")["data"])
    fields = {f"CITEMON_{f.upper()}" for f in Settings.model_fields}
    unknown = {n for n in names if n not in fields and not n.startswith("CITEMON_JUDGE")}
    assert not unknown, unknown
    defaults = Settings()
    assert defaults.topic == "otlp_spans" and defaults.group == "citemon"
    assert defaults.metrics_port == DEFAULT_METRICS_PORT
    assert float(k8s("ConfigMap")["data"]["CITEMON_DRAIN_TIMEOUT_S"]) == defaults.drain_timeout_s


def test_metric_names_and_types_match_design() -> None:
    text = registry_text()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    samples = {
        m.group(1): set(re.findall(r'(\w+)="', m.group(2) or ""))
        for m in re.finditer(r"^(\w+)(?:\{(.*)\})? ", text, re.M)
    }
    for name, kind in CONTRACT_METRICS.items():
        assert types.get(name) == kind, (name, types.get(name))
        sample = name + "_count" if kind == "histogram" else name
        assert sample in samples, name
        if name in CONTRACT_LABELS:
            assert samples[sample] == CONTRACT_LABELS[name], name


def design_section(heading: str) -> str:
    """The text under ``## {heading}`` in docs/design.md, up to the next ``##`` heading."""
    return DESIGN_PAGE.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def design_table_names(heading: str) -> tuple[str, ...]:
    """The code-quoted names heading the rows of the first table under ``## {heading}``."""
    lines = design_section(heading).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = itertools.takewhile(lambda line: line.startswith("|"), lines[start:])
    return tuple(m.group(1) for row in rows if (m := re.match(r"^\| `(\w+)` \|", row)))


def test_design_page_names_the_metrics_this_file_checks() -> None:
    """The table above is the design page's, not a copy that drifted from it."""
    section = design_section("Metrics")
    named = set(re.findall(r"`(citemon_[a-z_]+)", section))
    assert named == set(CONTRACT_METRICS), named ^ set(CONTRACT_METRICS)
    rows = dict(
        re.findall(r"^\| `(citemon_[a-z_]+)[^`]*` \| (counter|gauge|histogram) \|", section, re.M)
    )
    assert rows == {k: v for k, v in CONTRACT_METRICS.items() if k in rows}
    assert len(rows) == len(CONTRACT_METRICS) - 4  # one row names the four windowed gauges
    # …and the one row that names the four windowed gauges together.
    (windowed,) = [ln for ln in section.splitlines() if "`citemon_citation_accuracy`" in ln]
    gauges = re.findall(r"`(citemon_[a-z_]+)`", windowed.split("|")[1])
    assert len(gauges) == 4 and {CONTRACT_METRICS[g] for g in gauges} == {"gauge"}
    assert windowed.split("|")[2].strip() == "gauge"


def test_design_page_topics_are_the_defaults() -> None:
    """The Kafka topics table names the topics and group the monitor really defaults to."""
    from citemon._commands._results import DEFAULT_RESULTS_TOPIC

    rows = {
        row.split("|")[1].strip(): row.split("|")[2]
        for row in design_section("Kafka topics").splitlines()
        if row.startswith("| ") and not row.startswith("| topic")
    }
    defaults = Settings()
    assert set(rows) == {"input", "dead letters", "results", "review", "re-key"}, set(rows)
    assert rows["input"].strip().startswith(f"`{defaults.topic}` (`--topic`)")
    assert f"consumer group `{defaults.group}`" in design_section("Kafka topics")
    assert rows["dead letters"].strip().startswith(f"`{defaults.dlq_topic}` (`--dlq-topic`)")
    assert defaults.results_topic is None and "off by default" in rows["results"]
    assert rows["results"].strip().startswith(f"`{DEFAULT_RESULTS_TOPIC}` (`--results-topic`")
    assert rows["review"].strip().startswith(f"`{defaults.review_topic}` (`--review-topic`)")


def test_design_page_names_every_unjudged_cause() -> None:
    """Every ``unjudged_cause`` the scorer can write is explained on the design page."""
    from citemon._core.records import UNJUDGED_CAUSES

    section = design_section("Verdicts").split("An `unjudged` claim says why", 1)[1]
    causes = re.findall(r"^\| `(\w+)` \|", section.split("\n\n", 2)[1], re.M)
    assert set(UNJUDGED_CAUSES) <= set(causes), set(UNJUDGED_CAUSES) - set(causes)
