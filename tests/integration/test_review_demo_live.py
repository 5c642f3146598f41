"""``citemon demo --review DIR`` on the real broker: every answer the live demo scored reaches
its review topic once, and the review set a person would label is written to DIR."""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from pathlib import Path

from citemon._review.model import read_review_records
from tests.integration.monitor_support import PYTHON, REPO

FINAL = "final, from the monitor's Prometheus counters:"


def test_the_live_demo_leaves_a_review_set(kafka_bootstrap: str, tmp_path: Path) -> None:
    directory = tmp_path / "review"
    done = subprocess.run(
        [
            PYTHON, "-m", "citemon.cli", "demo", "--bootstrap-servers", kafka_bootstrap,
            "--duration", "12", "--deploy-at", "4", "--rate", "20", "--interval", "3",
            "--metrics-port", "0", "--review", str(directory),
        ],
        cwd=REPO, env=dict(os.environ), capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    final = done.stdout.split(FINAL)[1]
    counted = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(v[12])\s+(\d+)\s", final, re.M)}
    assert set(counted) == {"v1", "v2"}, final
    records = read_review_records(directory / "review-records.jsonl")
    # Review rate 1: each answer the monitor counted, once, in its version.
    assert max(Counter(r.trace_id for r in records).values()) == 1
    assert Counter(r.version for r in records) == Counter(counted)
    chosen = read_review_records(directory / "review-set.jsonl")
    assert len(chosen) == min(50, len(records))
    assert {r.trace_id for r in chosen} <= {r.trace_id for r in records}
    # The planted checker faults are in the traffic: overlapping chunks flagged as such.
    assert any(c.overlap for r in records for c in r.claims)
    assert f"{len(records)} review records → {directory / 'review-records.jsonl'}" in done.stdout
