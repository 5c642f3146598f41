"""``citemon demo`` (what ``make demo`` runs) shows the deploy regression, on the real broker;
``citemon demo --via-collector`` (``make demo-collector``) shows the same through the project's
own OpenTelemetry Collector."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from pathlib import Path

from tests.integration.collector_support import collector_binary
from tests.integration.monitor_support import PYTHON, REPO

FINAL = "final, from the monitor's Prometheus counters:"


def _demo(
    kafka_bootstrap: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            PYTHON, "-m", "citemon.cli", "demo", "--bootstrap-servers", kafka_bootstrap,
            "--duration", "14", "--deploy-at", "5", "--rate", "20", "--interval", "2",
            "--metrics-port", "0", *extra,
        ],
        cwd=REPO, env=env or dict(os.environ), capture_output=True, text=True, timeout=90,
        check=False,
    )  # fmt: skip


def _assert_the_v2_drop(done: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The direct demo's assertions; returns the answers counted per version."""
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    final = done.stdout.split(FINAL)[1]
    rows = {
        m.group(1): (int(m.group(2)), float(m.group(3)), float(m.group(4)))
        for m in re.finditer(
            r"^(v[12])\s+(\d+)\s+([\d.]+)\s+\[[^\]]+\]\s+[\d.]+\s+[\d.]+\s+([\d.]+)", final, re.M
        )
    }
    assert set(rows) == {"v1", "v2"}, final
    (n1, acc1, faith1), (n2, acc2, faith2) = rows["v1"], rows["v2"]
    assert n1 >= 40 and n2 >= 40
    assert acc1 > 0.85 and acc2 < 0.5  # the attribution bug is plain
    assert faith1 == faith2 == 1.0  # and invisible to faithfulness
    assert "v1 → v2: citation accuracy" in final
    return {"v1": n1, "v2": n2}


def _last_sent(stdout: str) -> int:
    return int(re.findall(r"answers sent (\d+)", stdout.split(FINAL)[0])[-1])


def test_demo_shows_the_v2_accuracy_drop(kafka_bootstrap: str) -> None:
    done = _demo(kafka_bootstrap)
    _assert_the_v2_drop(done)
    # A healthy start is quiet: aiokafka's "coordinator not available (yet)" while the group
    # forms is debug-level noise (the lifecycle's quiet start), not an ERROR before the table.
    assert not re.search(r" (ERROR|WARNING) ", done.stderr), done.stderr[-2000:]
    # Piped, every table is appended (a terminal gets one table refreshed in place).
    assert done.stdout.split(FINAL)[0].count("t=") >= 5


def test_demo_with_ids_only_documents_and_its_store_shows_the_same_drop(
    kafka_bootstrap: str,
) -> None:
    """``--ids-only``: the service traces documents by ID alone; the monitor reads their text
    from the SQLite store the demo fills, and sees what it sees with text in the trace."""
    # Without the store every claim would be unjudged: no accuracy row to read at all.
    _assert_the_v2_drop(_demo(kafka_bootstrap, "--ids-only"))


def test_demo_via_the_collector_shows_the_same_drop(kafka_bootstrap: str) -> None:
    otelcol = collector_binary()  # fails under CI=true when `make collector` has not run
    done = _demo(kafka_bootstrap, "--via-collector", "--collector", str(otelcol))
    counted = _assert_the_v2_drop(done)
    header = done.stdout.splitlines()[0]
    assert re.search(r"→ OTLP/HTTP http://127\.0\.0\.1:\d+/v1/traces → Collector ", header), header
    # Every answer the service sent went through the Collector and was counted once: the
    # Collector is stopped (and flushes to Kafka) before the monitor is.
    assert sum(counted.values()) == _last_sent(done.stdout), done.stdout[-2000:]
    assert "Exporter already shutdown" not in done.stderr  # each exporter shut down once


def test_demo_without_a_built_collector_names_make_collector(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # An empty cache: deploy/collector.sh finds no build there.
    env = {**os.environ, "CITEMON_CACHE": str(tmp_path / "cache")}
    env.pop("CITEMON_COLLECTOR", None)
    done = _demo(kafka_bootstrap, "--via-collector", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "citemon: error: the OpenTelemetry Collector is not built" in done.stderr
    assert "make collector" in done.stderr
    assert FINAL not in done.stdout  # refused before anything started

    env["CITEMON_COLLECTOR"] = str(tmp_path / "no-such-otelcol")
    done = _demo(kafka_bootstrap, "--via-collector", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"$CITEMON_COLLECTOR {tmp_path}/no-such-otelcol is not an executable" in done.stderr
    assert "make collector" in done.stderr


def test_a_collector_that_fails_to_start_shows_its_output(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    broken = tmp_path / "otelcol"
    broken.write_text(
        "#!/bin/sh\necho 'error decoding config: no such receiver: otlp' >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where the demo keeps the Collector's log
    done = _demo(kafka_bootstrap, "--collector", str(broken), env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "citemon: error: the Collector exited (1) while starting" in done.stderr
    assert "error decoding config: no such receiver: otlp" in done.stderr
    assert FINAL not in done.stdout
    (log,) = tmp_path.glob("citemon-demo-*/collector.log")  # kept, and named in the error
    assert f"its log ({log})" in done.stderr


def test_ctrl_c_stops_the_collector_too(kafka_bootstrap: str, tmp_path: Path) -> None:
    otelcol = collector_binary()
    proc = subprocess.Popen(
        [
            PYTHON, "-m", "citemon.cli", "demo", "--bootstrap-servers", kafka_bootstrap,
            "--duration", "60", "--interval", "1", "--metrics-port", "0",
            "--collector", str(otelcol),
        ],
        cwd=REPO, env={**os.environ, "TMPDIR": str(tmp_path)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        header = proc.stdout.readline()  # printed once the Collector listens
        port = re.search(r"OTLP/HTTP http://127\.0\.0\.1:(\d+)/v1/traces", header)
        assert port, header + proc.stderr.read() if proc.stderr else header
        assert _listening(int(port.group(1)))
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "interrupted: stopping the service and the monitor" in out
    assert not _listening(int(port.group(1)))  # the Collector is gone, not orphaned
    assert list(tmp_path.iterdir()) == []  # and its working directory removed


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0
