"""The two distributions as pip builds them: what each wheel installs, what it depends on, and
what importing the shim costs (docs/design.md, "Layout and packaging").

The wheels are built from this checkout with ``pip wheel --no-deps --no-build-isolation`` (the
venv's own setuptools, no network), as a release would build them.
"""

from __future__ import annotations

import email.parser
import json
import logging
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import citemon
import citemon_instrumentation
from citemon.cli import main
from tests.conftest import REPO

#: Modules a service exporting through a Collector never needs: importing the shim loads none.
HEAVY = (
    "aiokafka",
    "opentelemetry.sdk",
    "opentelemetry.exporter",
    "opentelemetry.proto",
    "google.protobuf",
    "citemon_instrumentation._kafka",
    "citemon",
    "pydantic",
    "httpx",
)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheels")
    for project in (REPO / "instrumentation", REPO):
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
             "-w", str(out), str(project)],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
    built = {p.name.split("-")[0]: zipfile.ZipFile(p) for p in out.glob("*.whl")}
    assert sorted(built) == ["citemon", "citemon_instrumentation"]
    return built


def _top_level(wheel: zipfile.ZipFile) -> set[str]:
    return {n.split("/")[0] for n in wheel.namelist() if ".dist-info/" not in n}


def _metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    return email.parser.Parser().parsestr(wheel.read(name).decode())


def test_each_wheel_installs_only_its_own_package(wheels: dict[str, zipfile.ZipFile]) -> None:
    assert _top_level(wheels["citemon"]) == {"citemon"}
    assert _top_level(wheels["citemon_instrumentation"]) == {"citemon_instrumentation"}
    names = set(wheels["citemon"].namelist())
    assert {"citemon/py.typed", "citemon/data/learned_judge.json", "citemon/cli.py"} <= names
    assert "citemon_instrumentation/py.typed" in wheels["citemon_instrumentation"].namelist()


def test_the_shim_depends_on_the_api_alone(wheels: dict[str, zipfile.ZipFile]) -> None:
    meta = _metadata(wheels["citemon_instrumentation"])
    requires = meta.get_all("Requires-Dist") or []
    plain = [r for r in requires if "extra ==" not in r]
    kafka = sorted(r.split(";")[0].split("<")[0].split(">")[0] for r in requires if "kafka" in r)
    assert [r.replace(" ", "") for r in plain] == ["opentelemetry-api<2,>=1.25"]
    assert kafka == sorted(
        ["aiokafka", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-common", "cramjam"]
    )
    assert meta["Requires-Python"] == ">=3.10"
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert any(n.endswith("licenses/LICENSE") for n in wheels["citemon_instrumentation"].namelist())


def test_the_monitor_depends_on_the_shim(wheels: dict[str, zipfile.ZipFile]) -> None:
    meta = _metadata(wheels["citemon"])
    requires = [r.replace(" ", "") for r in meta.get_all("Requires-Dist") or []]
    assert "citemon-instrumentation[kafka]<0.2,>=0.1" in requires
    assert meta["License-Expression"] == "Apache-2.0"
    assert "Homepage" in " ".join(meta.get_all("Project-URL") or [])
    assert "Typing :: Typed" in (meta.get_all("Classifier") or [])


def _imported_after(code: str) -> list[str]:
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    return list(json.loads(out.splitlines()[-1]))


def test_importing_the_shim_loads_no_exporter_sdk_or_monitor() -> None:
    loaded = _imported_after("import citemon_instrumentation")
    heavy = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == []
    assert "opentelemetry.trace" in loaded  # the API is what it is built on


def test_the_kafka_exporter_loads_when_first_used() -> None:
    loaded = _imported_after(
        "import citemon_instrumentation as c\n"
        "from citemon_instrumentation._kafka import KafkaSpanExporter as K\n"
        "assert c.KafkaSpanExporter is K and 'KafkaSpanExporter' in dir(c)"
    )
    assert "citemon_instrumentation._kafka" in loaded
    assert "aiokafka" not in loaded  # aiokafka itself waits for the first export


def test_without_the_kafka_extra_the_error_names_it() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry.sdk'] = None  # as if the SDK were not installed\n"
        "import citemon_instrumentation\n"
        "try:\n"
        "    citemon_instrumentation.KafkaSpanExporter\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    assert out.strip() == (
        "KafkaSpanExporter needs the [kafka] extra (opentelemetry.sdk.trace is not installed): "
        "pip install 'citemon-instrumentation[kafka]'"
    )
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        citemon_instrumentation.nothing  # noqa: B018


def test_versions_come_from_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    assert citemon.__version__ == metadata.version("citemon")
    assert citemon_instrumentation.__version__ == metadata.version("citemon-instrumentation")
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"citemon {metadata.version('citemon')}\n"


def test_the_shim_reports_its_version_as_the_span_scope() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    citemon_instrumentation.record_answer(
        question="q", answer="a [p-1]", passages=[("p-1", "a")], tracer_provider=provider
    )
    (span,) = exporter.get_finished_spans()
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "citemon.instrumentation"
    assert span.instrumentation_scope.version == metadata.version("citemon-instrumentation")


def test_loggers_are_named_after_the_packages() -> None:
    from citemon_instrumentation import _kafka, _stats

    assert _stats._log.name == "citemon_instrumentation"
    assert _kafka._log.name == "citemon_instrumentation.kafka"
    assert logging.getLogger("citemon").name == "citemon"


def test_python_m_citemon_runs_the_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "citemon", "--version"],
        check=True, capture_output=True, text=True, timeout=60, cwd=Path("/"),
    ).stdout  # fmt: skip
    assert out == f"citemon {metadata.version('citemon')}\n"
