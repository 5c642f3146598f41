"""Bad input to each CLI command, as a README reader would try it: a clear error, exit status 2
(1 and 3 mean something else to `compare` and `selftest`), no traceback, nothing dropped."""

from __future__ import annotations

import socket

import pytest

from monitor.cli import main


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
