"""Bad input to each CLI command, as a README reader would try it: a clear error, exit status 2
(1 and 3 mean something else to `compare` and `selftest`), no traceback, nothing dropped."""

from __future__ import annotations

import pytest

from monitor.cli import main


def test_run_rejects_a_zero_window(capsys: pytest.CaptureFixture[str]) -> None:
    # Was a ValueError traceback (exit 1) from the windowed gauges after start-up began.
    assert main(["run", "--window", "0", "--metrics-port", "0"]) == 2
    err = capsys.readouterr().err
    assert "window" in err and "greater than 0" in err
    assert "Traceback" not in err
