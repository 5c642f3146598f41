"""The whole paging path, live: the demo's bad deploy makes `CitationAccuracyDrop` fire.

A fake RAG service (v1, then v2 with the attribution bug) sends spans through the real shim and
`KafkaSpanExporter` to a real broker; `citemon run` (a subprocess) scores them; Debian's
Prometheus scrapes it and evaluates the project's own rules; the alert's state is read from
Prometheus's HTTP API. `citemon compare --prometheus` then reads the same counters and gates the
deploy.

The rules are the shipped file with only its durations compressed (the 1-hour window → 2 min,
15 minutes → 30 s, 5 → 10 s, 1 → 4 s, `for: 30s` → `for: 1s`), so the test takes seconds, not
half an hour; every expression, threshold and sample guard is the shipped one.
(bench/time_to_detect.py measures the same deploy with nothing compressed.)
"""

from __future__ import annotations

import asyncio
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from citemon._demo.service import FakeRAGService
from citemon.cli import main as citemon
from tests.conftest import REPO
from tests.integration.monitor_support import start_scraped_monitor
from tests.integration.prometheus_support import free_port, run_prometheus

RULES = REPO / "grafana" / "rules" / "citemon.rules.yml"
ALERT = "CitationAccuracyDrop"
#: Rule evaluations (1 s apart) v1 must pass through without the alert even turning pending.
QUIET_EVALUATIONS = 5


def compressed_rules(path: Path) -> Path:
    text = RULES.read_text(encoding="utf-8")
    counts = []
    for pattern, short in (
        (r"\[1h\]", "[2m]"),
        (r"\[15m\]", "[30s]"),
        (r"\[5m\]", "[10s]"),
        (r"\[1m\]", "[4s]"),
        (r"for: 30s\b", "for: 1s"),
    ):
        text, n = re.subn(pattern, short, text)
        counts.append(n)
    assert counts[0] >= 2 and counts[1] >= 4 and counts[2] >= 3, "rules changed shape: update"
    assert counts[3] >= 2 and counts[4] >= 5, "rules changed: update this test"
    out = path / "rules.yml"
    out.write_text(text, encoding="utf-8")
    return out


class Traffic:
    """The fake RAG service answering ~20 questions a second in a thread, version switchable."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.service = FakeRAGService(bootstrap, topic, batch_delay_ms=100)
        self.service.deploy("v1")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.service.handle()
            time.sleep(0.05)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.service.shutdown()


async def alerts(client: httpx.AsyncClient, url: str) -> list[dict[str, Any]]:
    body = (await client.get(f"{url}/api/v1/alerts")).json()
    return [a for a in body["data"]["alerts"] if a["labels"]["alertname"] == ALERT]


async def wait_until(check: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = await check()
        if got:
            return got
        await asyncio.sleep(1.0)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")


async def test_bad_deploy_fires_citation_accuracy_drop(
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topic: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = await kafka_topic(partitions=3)
    port = free_port()
    monitor = start_scraped_monitor(kafka_bootstrap, topic, port, tmp_path / "monitor.log")
    try:
        async with (
            run_prometheus(tmp_path, compressed_rules(tmp_path), port) as url,
            httpx.AsyncClient(timeout=10) as client,
        ):
            with Traffic(kafka_bootstrap, topic) as traffic:

                async def v1_scored() -> bool:
                    q = "citemon:cited_claims:increase15m"  # 30 s window after compression
                    reply = await client.get(f"{url}/api/v1/query", params={"query": q})
                    result = reply.json()["data"]["result"]
                    return any(
                        r["metric"].get("version") == "v1" and float(r["value"][1]) >= 30
                        for r in result
                    )

                await wait_until(v1_scored, 60, "v1 traffic above the 30-claim guard")
                # v1 alone, above the sample guard: not pending at any evaluation, so never
                # firing either (pending is listed too, and shows at the first true evaluation).
                for _ in range(QUIET_EVALUATIONS):
                    await asyncio.sleep(1.0)
                    assert await alerts(client, url) == [], "v1 (healthy) must not page"

                traffic.service.deploy("v2", first_passage_bug=True)

                async def v2_firing() -> list[dict[str, Any]]:
                    return [
                        a for a in await alerts(client, url)
                        if a["state"] == "firing" and a["labels"].get("version") == "v2"
                    ]  # fmt: skip

                # Both paths may fire on this drop (the windows are compressed alike).
                firing = await wait_until(v2_firing, 90, f"{ALERT} firing for v2")
            assert {a["labels"]["path"] for a in firing} <= {"fast", "slow"}
            for alert in firing:
                assert alert["labels"]["severity"] == "critical"
                assert alert["labels"]["service"] == "support-bot"
                assert float(alert["value"]) < 0.5
                # The why annotation, from the citemon.patterns recordings: every claim of v2
                # cites the first retrieved passage.
                why = alert["annotations"]["why"]
                assert why.startswith(
                    "Most misattributed claims are first_retrieved: 100% of this version's"
                ), why
            assert all(a["labels"].get("version") == "v2" for a in await alerts(client, url))

            # The deploy gate reads the same counters through the HTTP API.
            code = citemon(["compare", "--prometheus", url, "--baseline", "v1",
                            "--candidate", "v2", "--window", "10m"])  # fmt: skip
            out = capsys.readouterr().out
            assert code == 1, out
            assert "verdict: regressed" in out
            assert "patterns changed: first_retrieved" in out
    finally:
        monitor.send_signal(signal.SIGTERM)
        try:
            monitor.wait(40)
        except Exception:
            monitor.kill()
            raise
    # SIGTERM drains and exits 0 (checked only when the test body got here).
    assert monitor.returncode == 0, (tmp_path / "monitor.log").read_text()[-3000:]
