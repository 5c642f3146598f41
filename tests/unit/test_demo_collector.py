"""``citemon demo --via-collector``: which Collector it runs, and what it refuses before Kafka.

(The run itself, through a real Collector and a real broker, is in
tests/integration/test_monitor_demo.py.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from citemon._commands._collector import (
    COLLECTOR_ENV,
    CollectorError,
    collector_binary,
    deploy_dir,
    override,
)
from citemon.cli import main
from tests.conftest import REPO


def _executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_an_explicit_path_wins_over_the_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine, theirs = _executable(tmp_path / "mine"), _executable(tmp_path / "theirs")
    monkeypatch.setenv(COLLECTOR_ENV, str(theirs))
    assert collector_binary(str(mine)) == mine
    assert collector_binary() == theirs


@pytest.mark.parametrize("kind", ["missing", "not executable"])
def test_a_bad_path_is_refused_and_names_make_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.delenv(COLLECTOR_ENV, raising=False)
    path = tmp_path / "otelcol"
    if kind == "not executable":
        path.write_text("not a program")
    with pytest.raises(CollectorError) as err:
        collector_binary(str(path))
    assert str(err.value).startswith(f"--collector {path} is not an executable file")
    assert "`make collector`" in str(err.value)


def test_without_a_build_the_error_names_make_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(COLLECTOR_ENV, raising=False)
    monkeypatch.setenv("CITEMON_CACHE", str(tmp_path))  # deploy/collector.sh finds no build here
    with pytest.raises(CollectorError) as err:
        collector_binary()
    assert str(err.value).startswith("the OpenTelemetry Collector is not built (")
    assert "build it with `make collector`" in str(err.value)


def test_the_override_is_yaml_and_changes_only_ports_topics_and_self_metrics() -> None:
    assert deploy_dir() == REPO / "deploy"
    written = json.dumps(override("demo.spans", 40001, 40002, None))
    assert yaml.safe_load(written) == {
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": "127.0.0.1:40001"},
                    "http": {"endpoint": "127.0.0.1:40002"},
                }
            }
        },
        "exporters": {
            "kafka": {"traces": {"topic": "demo.spans"}, "logs": {"topic": "demo.spans.logs"}}
        },
        "service": {"telemetry": {"metrics": {"level": "none"}}},
    }
    assert override("t", 1, 2, "zstd")["exporters"]["kafka"]["producer"] == {"compression": "zstd"}
    assert override("t", 1, 2, None, "t.events")["exporters"]["kafka"]["logs"] == {
        "topic": "t.events"
    }


def test_demo_refuses_a_missing_collector_before_touching_kafka(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(COLLECTOR_ENV, str(tmp_path / "nope"))
    argv = ["demo", "--bootstrap-servers", "127.0.0.1:1", "--metrics-port", "0", "--via-collector"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"citemon: error: ${COLLECTOR_ENV} {tmp_path}/nope is not an executable file" in err
    assert "cannot reach Kafka" not in err


def test_demo_without_the_otlp_exporter_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(COLLECTOR_ENV, str(_executable(tmp_path / "otelcol")))
    # As if opentelemetry-exporter-otlp-proto-http were not installed: importing it fails.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    argv = ["demo", "--bootstrap-servers", "127.0.0.1:1", "--metrics-port", "0", "--via-collector"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "citemon: error: --via-collector needs the OTLP HTTP exporter" in err
    assert "pip install 'citemon[collector]'" in err
    assert "cannot reach Kafka" not in err
