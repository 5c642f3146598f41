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
