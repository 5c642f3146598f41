"""Shared test fixtures: where the labelled data lives and how missing servers are treated."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

pytest_plugins = ["tests.judge_server"]  # the `judge_server` fixture: a real HTTP judge on loopback


def need_server(what: str, why: str) -> None:
    """A missing server fails under CI=true and skips (with the reason) elsewhere."""
    message = f"{what} is not available: {why}"
    if IN_CI:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (labelled data for calibration); skipped where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"labelled data not found at {SHARED_DATA} (only the project's CI has it)")
    return SHARED_DATA
