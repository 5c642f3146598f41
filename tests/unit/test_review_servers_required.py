"""Under CI=true the review tests' real servers are required: a missing Label Studio or browser
fails the run instead of skipping it (tests/conftest.py, ``need_server``)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def test_a_missing_label_studio_fails_under_ci() -> None:
    env = {**os.environ, "CI": "true", "CITEMON_TEST_LABEL_STUDIO": "/nonexistent/label-studio"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/integration/test_review_labelstudio.py::test_the_exported_config_is_accepted_and_keeps_passage_text_as_data"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert (
        "Label Studio is not available: /nonexistent/label-studio/bin/label-studio is missing"
        in (proc.stdout)
    )
    assert "1 error" in proc.stdout
