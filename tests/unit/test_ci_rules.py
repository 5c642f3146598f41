"""What CI relies on: labelled data missing under ``CI=true`` fails the run (elsewhere it
skips), and a pytest run that collects nothing fails (``.ci/pytest``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, need_shared_data


def test_missing_shared_data_fails_under_ci(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match=f"labelled data not found at {tmp_path}/no"):
        need_shared_data(tmp_path / "no", in_ci=True)


def test_missing_shared_data_skips_with_the_reason_elsewhere(tmp_path: Path) -> None:
    with pytest.raises(pytest.skip.Exception, match=f"labelled data not found at {tmp_path}/no"):
        need_shared_data(tmp_path / "no", in_ci=False)


def test_present_shared_data_is_returned_in_and_out_of_ci(tmp_path: Path) -> None:
    assert need_shared_data(tmp_path, in_ci=True) == tmp_path
    assert need_shared_data(tmp_path, in_ci=False) == tmp_path


def _ci_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        [str(REPO / ".ci" / "pytest"), "-q", "-p", "no:cacheprovider", *args],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_run_that_collects_no_tests_fails_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    done = _ci_pytest(tmp_path, "-m", "no_such_marker")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "pytest collected no tests (pytest -q -p no:cacheprovider -m no_such_marker)" in (
        done.stderr
    )


def test_other_statuses_are_pytests_own(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    passed = _ci_pytest(tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "1 passed" in passed.stdout
    (tmp_path / "test_two.py").write_text("def test_two():\n    assert 1 + 1 == 3\n")
    failed = _ci_pytest(tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "1 failed, 1 passed" in failed.stdout


def test_ci_runs_the_suite_then_the_slow_suite() -> None:
    run = (REPO / ".ci" / "run").read_text()
    assert "for target in test test-slow; do" in run
    makefile = (REPO / "Makefile").read_text()
    assert 'PYTHON=$(BIN)/python .ci/pytest -q -m "not slow"' in makefile
    assert "PYTHON=$(BIN)/python .ci/pytest -q -m slow\n" in makefile


def _prerequisites(makefile: str, target: str) -> set[str]:
    line = next(line for line in makefile.splitlines() if line.startswith(f"{target}:"))
    return set(line.partition(":")[2].split())


def test_the_llama_cpp_tests_wait_for_the_slow_suite() -> None:
    """A newcomer's first `make test` does not compile llama.cpp; the slow suite, which runs the
    tests that need its server, does (and CI runs both)."""
    makefile = (REPO / "Makefile").read_text()
    assert "llama" not in _prerequisites(makefile, "test")
    assert "llama" in _prerequisites(makefile, "test-slow")
    module = (REPO / "tests" / "integration" / "test_llama_cpp_judge.py").read_text()
    assert "\npytestmark = pytest.mark.slow\n" in module
    users = [
        path.relative_to(REPO)
        for path in (REPO / "tests").rglob("test_*.py")
        if path != Path(__file__)
        and "from tests.integration.llama_support import" in path.read_text(encoding="utf-8")
    ]
    assert users == [Path("tests/integration/test_llama_cpp_judge.py")]
