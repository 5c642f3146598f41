"""deploy/otel-collector.yaml says what the span contract needs (no Collector binary here)."""

from __future__ import annotations

from typing import Any

import yaml

from tests.conftest import REPO


def test_collector_pipeline_writes_otlp_proto_keyed_by_trace_to_otlp_spans() -> None:
    config: dict[str, Any] = yaml.safe_load((REPO / "deploy" / "otel-collector.yaml").read_text())
    kafka = config["exporters"]["kafka"]
    assert kafka["traces"] == {"topic": "otlp_spans", "encoding": "otlp_proto"}
    assert kafka["partition_traces_by_id"] is True
    assert kafka["producer"]["max_message_bytes"] <= 1_000_000
    pipeline = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    assert pipeline["processors"][-1] == "batch" and pipeline["exporters"] == ["kafka"]
    assert set(pipeline["processors"]) <= set(config["processors"])
    assert set(config["receivers"]["otlp"]["protocols"]) == {"grpc", "http"}


def test_collector_logs_pipeline_carries_evaluation_events_to_otlp_logs_keyed_by_trace() -> None:
    """``citemon run --evaluation-events`` → OTLP logs → the same Collector → ``otlp_logs``,
    keyed by trace ID like the spans; the trace pipeline is untouched by it."""
    config: dict[str, Any] = yaml.safe_load((REPO / "deploy" / "otel-collector.yaml").read_text())
    kafka = config["exporters"]["kafka"]
    assert kafka["logs"] == {"topic": "otlp_logs", "encoding": "otlp_proto"}
    assert kafka["partition_logs_by_trace_id"] is True
    assert "partition_logs_by_resource_attributes" not in kafka  # exclusive with by-trace-ID
    pipelines = config["service"]["pipelines"]
    assert set(pipelines) == {"traces", "logs"}
    assert pipelines["logs"] == pipelines["traces"]
