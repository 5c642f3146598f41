"""Where the human-labelled data sets (WiCE, ExpertQA) are: the one place that says so.

They are not part of the repository (their licences are their own). ``CITEMON_LABELLED_DATA``
names their folder; without it, the project's CI layout is assumed: a ``shared/data`` folder
beside the checkout. The data tests (through ``tests.conftest``), the benchmarks and the
training scripts all ask :func:`labelled_data_dir`, so package code and docs never name a path
outside the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["LABELLED_DATA_ENV", "labelled_data_dir"]

LABELLED_DATA_ENV = "CITEMON_LABELLED_DATA"
"""The environment variable naming the labelled data's folder."""

_REPO = Path(__file__).resolve().parent.parent


def labelled_data_dir() -> Path:
    """The folder of the labelled data sets (which may not exist: callers check)."""
    named = os.environ.get(LABELLED_DATA_ENV)
    return Path(named) if named else _REPO.parent / "shared" / "data"
