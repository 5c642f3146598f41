from __future__ import annotations

import socket

import pytest

from citemon.cli import main


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens once the socket is closed


def test_unreachable_kafka_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--bootstrap-servers", f"127.0.0.1:{closed_port()}", "--metrics-port", "0",
            "--metrics-host", "127.0.0.1", "--policy", "single"]  # fmt: skip
    assert main(argv) == 2
    assert "cannot connect to Kafka at 127.0.0.1:" in capsys.readouterr().err


def test_bad_settings_are_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--sample-rate", "1.5", "--metrics-port", "0"]) == 2
    assert "sample_rate" in capsys.readouterr().err
