"""The autouse fixture of tests/conftest.py: a developer's ``CITEMON_*`` settings never reach a
test, the test harness's own variables (brokers, Collector build) do."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import HARNESS_ENV, REPO

EXPECT = "HARNESS_ENV_EXPECT"  # not CITEMON_*: the probe's instructions survive the fixture


def test_no_citemon_setting_reaches_a_test() -> None:
    leaked = sorted(n for n in os.environ if n.startswith("CITEMON_") and n not in HARNESS_ENV)
    assert leaked == []
    expected: dict[str, str] = json.loads(os.environ.get(EXPECT, "{}"))
    assert {name: os.environ.get(name) for name in expected} == expected


def test_a_developers_settings_are_cleared_and_the_harness_kept() -> None:
    env = {
        **os.environ,
        "CITEMON_JUDGE": "http",
        "CITEMON_JUDGE_API_KEY": "sk-developer",
        "CITEMON_TOPIC": "dev.spans",
        "CITEMON_KAFKA_PORT": "19951",
        "CITEMON_CACHE": "/tmp/citemon-cache",
        EXPECT: json.dumps({"CITEMON_KAFKA_PORT": "19951", "CITEMON_CACHE": "/tmp/citemon-cache"}),
    }
    probe = f"{__file__}::test_no_citemon_setting_reaches_a_test"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", probe],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "1 passed" in proc.stdout


def test_the_harness_list_names_what_the_scripts_read() -> None:
    scripts = (REPO / "deploy" / "kafka.sh").read_text() + (
        REPO / "deploy" / "collector.sh"
    ).read_text()
    for name in HARNESS_ENV:
        if name.startswith("CITEMON_TEST_"):
            continue  # read by the broker-owning tests themselves
        if name == "CITEMON_KAFKA_BOOTSTRAP":
            continue  # read by tests/integration/conftest.py
        assert name in scripts, name
