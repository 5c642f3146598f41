"""The shim on every Python it supports: the same spans, attribute for attribute.

``make shim-pythons`` (scripts/shim_pythons.sh) makes a venv per other interpreter with only the
OpenTelemetry API and SDK: Python 3.10, the shim's floor, with the oldest API it allows (1.25),
and 3.12 and 3.13 with the newest. Each runs ``shim_probe.py`` against the shim's source; its
output must equal this interpreter's (3.11, the monitor's), which is checked on its own first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, need_server

PROBE = REPO / "tests" / "integration" / "shim_probe.py"
VENVS = Path(
    os.environ.get("CITEMON_TEST_SHIM_PYTHONS", Path.home() / ".cache" / "citemon" / "shim-pythons")
)
#: The venvs scripts/shim_pythons.sh makes: (Python, OpenTelemetry API/SDK).
PYTHONS = [("3.10", "1.25.0"), ("3.12", "1.45.2"), ("3.13", "1.45.2")]
FLOOR = "3.10"


def probe(python: str | Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "instrumentation" / "src")}
    done = subprocess.run(
        [str(python), str(PROBE)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.fixture(scope="module")
def here() -> dict[str, Any]:
    return probe(sys.executable)


def test_the_probe_records_what_the_span_contract_says(here: dict[str, Any]) -> None:
    """What every other interpreter must reproduce, checked here against the contract."""
    answer, child, long_one, failed, too_long, cited = here["spans"]
    a = answer["attributes"]
    assert (answer["name"], answer["parent"], answer["status"]) == ("rag.answer", None, "UNSET")
    assert a["openinference.span.kind"] == "CHAIN" and a["citemon.passages.count"] == 3
    assert a["retrieval.documents.1.document.content"].endswith("over [amount].")  # redacted
    assert json.loads(a["retrieval.documents.2.document.metadata"])["source"] == "policy.pdf"
    assert (child["name"], child["parent"]) == ("retrieve", "rag.answer")
    la = long_one["attributes"]
    # 40 passages past a 64-attribute limit: the first as attributes, the rest in the overflow.
    indexed = [
        la[f"retrieval.documents.{i}.document.id"]
        for i in range(40)
        if f"retrieval.documents.{i}.document.id" in la
    ]
    overflow = [p["id"] for p in json.loads(la["citemon.passages.overflow"])]
    assert indexed + overflow == [f"d-{i}" for i in range(40)] and overflow
    assert la["citemon.passages.count"] == 40 and la["citemon.truncated"] is False
    assert la["output.value"] == "Shipping takes 2 days [d-0] \ufffd."  # a lone surrogate
    assert (failed["status"], failed["events"]) == ("ERROR", ["exception"])
    assert too_long["attributes"]["citemon.truncated"] is True
    ca = cited["attributes"]
    assert ca["output.value"] == "Refunds take 30 days. Ship free."
    assert ca["retrieval.documents.0.document.id"] == "p-1"
    assert json.loads(ca["citemon.citations"]) == [{"start": 0, "end": 21, "ids": ["p-1"]}]
    assert here["stats"] == {"answers": 5, "errors": 0, "truncated": 1}


@pytest.mark.parametrize(("minor", "otel"), PYTHONS, ids=[f"py{m}" for m, _ in PYTHONS])
def test_the_same_spans_on_every_supported_python(
    minor: str, otel: str, here: dict[str, Any]
) -> None:
    python = VENVS / f"py{minor}-otel{otel}" / "bin" / "python"
    if not python.exists():
        why = f"{python} is missing (make shim-pythons; Python {minor} from pyenv)"
        if minor == FLOOR:
            need_server(f"Python {minor}, the shim's floor,", why)
        pytest.skip(why)
    assert probe(python) == here
