"""Bad input to each CLI command, as a README reader would try it: a clear error, exit status 2
(1 and 3 mean something else to `compare` and `selftest`), no traceback, nothing dropped."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from monitor.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_run_rejects_a_zero_window(capsys: pytest.CaptureFixture[str]) -> None:
    # Was a ValueError traceback (exit 1) from the windowed gauges after start-up began.
    assert main(["run", "--window", "0", "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err
    assert "window" in err and "greater than 0" in err
    assert "Traceback" not in err


def test_run_with_its_metrics_port_taken_is_a_clear_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Was an OSError traceback (exit 1). The port is checked before Kafka is contacted.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["run", "--metrics-host", "127.0.0.1", "--metrics-port", str(port),
                "--bootstrap-servers", "127.0.0.1:1"]  # fmt: skip
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"cannot serve metrics on 127.0.0.1:{port}" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--marker-pattern", "["], "--marker-pattern is not a valid regex"),
        (["--marker-pattern", r"p-\d+"], "--marker-pattern needs a capturing group"),
        (["--overlap-tokens", "0"], "--overlap-tokens must be at least 1"),
        (["--overlap-tokens", "-1"], "--overlap-tokens must be at least 1"),
    ],
)
def test_score_rejects_bad_scoring_flags(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Were: re.error / IndexError tracebacks (exit 1); --overlap-tokens 0 flagged every
    # misattribution of the specimen as a chunk overlap and exited 0.
    assert main(["score", str(EXAMPLES / "specimen.jsonl"), *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_run_checks_the_marker_pattern_before_contacting_kafka(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "--marker-pattern", "(", "--metrics-port", "0",
            "--bootstrap-servers", "127.0.0.1:1"]  # fmt: skip
    assert main(argv) == 2
    assert "--marker-pattern is not a valid regex" in capsys.readouterr().err
