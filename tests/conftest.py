"""Shared test fixtures: where the labelled data lives and how missing servers are treated."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.labelled_data import LABELLED_DATA_ENV, labelled_data_dir

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = labelled_data_dir()
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# The `judge_server` fixture (a real HTTP judge on loopback) and `build` (pipelines built by
# build_monitor, closed after the test).
pytest_plugins = ["tests.judge_server", "tests.built"]


def need_server(what: str, why: str) -> None:
    """A missing server fails under CI=true and skips (with the reason) elsewhere."""
    message = f"{what} is not available: {why}"
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


#: ``CITEMON_*`` variables that configure the test harness, not citemon: the local brokers
#: (``deploy/kafka.sh``'s documented variables and the bootstrap address the integration tests
#: read), the Collector build (``deploy/collector.sh``) and the ports/timings of the tests that
#: start their own broker, and where the Label Studio venv is (``CITEMON_TEST_LABEL_STUDIO``).
#: :func:`_clean_citemon_env` keeps these and clears every other
#: ``CITEMON_*`` variable, so a developer's own settings (``CITEMON_JUDGE``, ``CITEMON_TOPIC``…)
#: never leak into a test; a test that wants one sets it with ``monkeypatch.setenv``.
HARNESS_ENV: frozenset[str] = frozenset(
    {
        "CITEMON_CACHE",
        "CITEMON_GO",
        "CITEMON_COLLECTOR_MANIFEST",
        "CITEMON_KAFKA_BOOTSTRAP",
        "CITEMON_KAFKA_PORT",
        "CITEMON_KAFKA_CONTROLLER_PORT",
        "CITEMON_KAFKA_VERSION",
        "CITEMON_KAFKA_HEAP",
        "CITEMON_KAFKA_START_TIMEOUT_S",
        "CITEMON_KAFKA_STOP_TIMEOUT_S",
        "CITEMON_KAFKA_SECURITY",
        "CITEMON_KAFKA_SASL_PORT",
        "CITEMON_KAFKA_SASL_CONTROLLER_PORT",
        "CITEMON_KAFKA_SSL_PORT",
        "CITEMON_TEST_RESTART_KAFKA_PORT",
        "CITEMON_TEST_SHIM_KAFKA_PORT",
        "CITEMON_TEST_BROKER_DOWN_S",
        "CITEMON_TEST_LABEL_STUDIO",
        "CITEMON_TEST_POSTGRES_BIN",
        "CITEMON_TEST_CHROMA",
        "CITEMON_TEST_SHIM_PYTHONS",
    }
)


@pytest.fixture(autouse=True)
def _clean_citemon_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts without the ``CITEMON_*`` variables citemon reads (see HARNESS_ENV)."""
    for name in list(os.environ):
        if name.startswith("CITEMON_") and name not in HARNESS_ENV:
            monkeypatch.delenv(name)


def need_shared_data(path: Path = SHARED_DATA, *, in_ci: bool = IN_CI) -> Path:
    """``path`` if it is a folder; else fail under ``CI=true`` (the project's CI has the data,
    so a test that cannot read it there proves nothing) and skip with the reason elsewhere."""
    if path.is_dir():
        return path
    message = f"labelled data not found at {path} (set {LABELLED_DATA_ENV} to its folder)"
    if in_ci:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The labelled data (:mod:`tests.labelled_data`): see :func:`need_shared_data`."""
    return need_shared_data()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A ``shared_data`` test must read the data through the fixture, so the CI rule (fail, not
    skip, when the data is missing) applies to it."""
    for item in items:
        if item.get_closest_marker("shared_data") and "shared_data" not in getattr(
            item, "fixturenames", ()
        ):
            raise pytest.UsageError(
                f"{item.nodeid} is marked shared_data but does not use the shared_data fixture"
            )
