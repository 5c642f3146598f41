"""deploy/otelcol-builder.yaml and deploy/collector.sh, without building anything."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO

MANIFEST = REPO / "deploy" / "otelcol-builder.yaml"
SCRIPT = REPO / "deploy" / "collector.sh"


def _gomods(manifest: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for kind in ("receivers", "processors", "exporters", "providers"):
        for entry in manifest[kind]:
            module, version = entry["gomod"].split()
            out[module] = version
    return out


def test_manifest_pins_one_release_of_exactly_what_the_shipped_config_uses() -> None:
    manifest = yaml.safe_load(MANIFEST.read_text())
    mods = _gomods(manifest)
    core = "go.opentelemetry.io/collector/"
    contrib = "github.com/open-telemetry/opentelemetry-collector-contrib/"
    assert mods == {
        core + "receiver/otlpreceiver": "v0.165.0",
        core + "processor/batchprocessor": "v0.165.0",
        core + "processor/memorylimiterprocessor": "v0.165.0",
        contrib + "exporter/kafkaexporter": "v0.165.1",
        core + "confmap/provider/fileprovider": "v1.71.0",
        core + "confmap/provider/envprovider": "v1.71.0",
        core + "confmap/provider/yamlprovider": "v1.71.0",
    }
    # Relative, so the builder writes into the directory collector.sh runs it in.
    assert not Path(manifest["dist"]["output_path"]).is_absolute()
    # Every component the shipped config names is built in, and nothing else.
    config = yaml.safe_load((REPO / "deploy" / "otel-collector.yaml").read_text())
    used = {
        *(f"{name}receiver" for name in config["receivers"]),
        *(f"{name.replace('_', '')}processor" for name in config["processors"]),
        *(f"{name}exporter" for name in config["exporters"]),
    }
    built = {m.rsplit("/", 1)[-1] for m in mods if "/confmap/" not in m}
    assert (
        used
        == built
        == {
            "otlpreceiver",
            "memorylimiterprocessor",
            "batchprocessor",
            "kafkaexporter",
        }
    )


def _script(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        env={**os.environ, "CITEMON_CACHE": str(cache)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_path_fails_with_the_fix_when_nothing_is_built(tmp_path: Path) -> None:
    out = _script("path", cache=tmp_path)
    assert out.returncode == 1 and out.stdout == ""
    assert "not built" in out.stderr and "make collector" in out.stderr


def test_a_go_that_does_not_run_is_an_error_not_a_build(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(SCRIPT), "build"],
        env={**os.environ, "CITEMON_CACHE": str(tmp_path), "CITEMON_GO": str(tmp_path / "no-go")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert re.search(r"no-go does not run", out.stderr)
    assert not (tmp_path / "collector" / "builder-v0.165.0").exists()


def test_unknown_command_prints_usage(tmp_path: Path) -> None:
    out = _script("frobnicate", cache=tmp_path)
    assert out.returncode == 2 and "usage:" in out.stderr
