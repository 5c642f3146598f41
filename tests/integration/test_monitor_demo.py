"""``citemon demo`` (what ``make demo`` runs) shows the deploy regression, on the real broker."""

from __future__ import annotations

import os
import re
import subprocess

from tests.integration.monitor_support import PYTHON, REPO


def test_demo_shows_the_v2_accuracy_drop(kafka_bootstrap: str) -> None:
    done = subprocess.run(
        [
            PYTHON, "-m", "citemon.cli", "demo", "--bootstrap-servers", kafka_bootstrap,
            "--duration", "14", "--deploy-at", "5", "--rate", "20", "--interval", "2",
            "--metrics-port", "0",
        ],
        cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    final = done.stdout.split("final, from the monitor's Prometheus counters:")[1]
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
