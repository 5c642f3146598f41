"""Time to detect the demo's bad deploy with the shipped alert rules, nothing compressed.

The demo's RAG service (:class:`citemon._demo.service.FakeRAGService`, 8 answers/s as in
``citemon demo``; ``run()`` then repeats it at the issue's one answer a second) ships spans
through the real shim and ``KafkaSpanExporter`` to the broker; ``citemon run`` (a subprocess)
scores them; Debian's Prometheus scrapes it every 15 s and evaluates
``grafana/rules/citemon.rules.yml`` as shipped every 15 s (the interval deploy/prometheus.yml
and the ServiceMonitor use). v1 serves for ``WARMUP_S`` (the service's 1-day baseline needs a
past), then v2 with the first-passage bug takes all traffic. Measured: seconds from v2's first
scored answer (its ``citemon_answers_total`` series appearing on the monitor's ``/metrics``,
polled every 0.1 s) to ``CitationAccuracyDrop`` firing for v2 (polled on Prometheus's
``/api/v1/alerts`` every 0.5 s), and when it turned pending (``activeAt``).

    .venv/bin/python -m bench time_to_detect      (about 9 minutes; needs the broker on 9092)

``tests/integration/test_time_to_detect.py`` (``-m slow``) runs the same measurement at 8
answers/s and asserts the ≤ 180 s target.
"""

from __future__ import annotations

import asyncio
import re
import signal
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.conftest import REPO
from tests.integration.demo_traffic import Traffic
from tests.integration.monitor_support import start_scraped_monitor
from tests.integration.prometheus_support import free_port, run_prometheus

__all__ = ["Detection", "measure", "run"]

RULES = REPO / "grafana" / "rules" / "citemon.rules.yml"
BOOTSTRAP = "127.0.0.1:9092"
ALERT = "CitationAccuracyDrop"
QUALITY_ALERTS = ("CitationAccuracyDrop", "CitationIdsPerClaimClimbing", "CitationCoverageDrop")
#: The demo's rate (``citemon demo --rate``, default 8 answers/s; three claims an answer).
RATE = 8.0
#: What ``run()`` measures: the demo's rate and the issue's one answer a second.
RATES = (RATE, 1.0)
#: How long v1 serves before the bad deploy.
WARMUP_S = 180.0
#: Scrape and rule evaluation interval.
INTERVAL = "15s"
TARGET_S = 180.0
#: Give up on the alert after this long (the slow path alone would fire after ~5-6 minutes).
DETECT_TIMEOUT_S = 420.0

_V2_ANSWERS = re.compile(r'^citemon_answers_total\{[^}]*version="v2"[^}]*\} ([0-9.e+]+)', re.M)


@dataclass
class Detection:
    """One measurement; times are seconds after v2's first scored answer."""

    firing_after_s: float
    pending_after_s: float
    path: str
    value: float
    deploy_to_first_score_s: float
    v1_alerts: list[dict[str, Any]] = field(default_factory=list)


async def _alerts(client: httpx.AsyncClient, url: str) -> list[dict[str, Any]]:
    body = (await client.get(f"{url}/api/v1/alerts")).json()
    alerts: list[dict[str, Any]] = body["data"]["alerts"]
    return [a for a in alerts if a["labels"]["alertname"] in QUALITY_ALERTS]


async def _v2_scored(client: httpx.AsyncClient, port: int) -> bool:
    try:
        text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    except httpx.TransportError:
        return False
    return any(float(v) > 0 for v in _V2_ANSWERS.findall(text))


async def measure(
    bootstrap: str,
    topic: str,
    workdir: Path,
    *,
    rate: float = RATE,
    warmup_s: float = WARMUP_S,
    interval: str = INTERVAL,
    timeout_s: float = DETECT_TIMEOUT_S,
) -> Detection:
    """Run the bad deploy once and time the page (see the module docstring)."""
    port = free_port()
    monitor = start_scraped_monitor(bootstrap, topic, port, workdir / "monitor.log")
    try:
        async with (
            run_prometheus(workdir, RULES, port, interval=interval) as url,
            httpx.AsyncClient(timeout=10) as client,
        ):
            with Traffic(bootstrap, topic, rate) as traffic:
                v1_alerts: list[dict[str, Any]] = []
                warm_until = time.monotonic() + warmup_s
                while time.monotonic() < warm_until:
                    v1_alerts += await _alerts(client, url)  # healthy v1: must stay empty
                    await asyncio.sleep(5.0)
                deployed = time.monotonic()
                traffic.service.deploy("v2", first_passage_bug=True)
                while not await _v2_scored(client, port):
                    if time.monotonic() - deployed > 60:
                        raise RuntimeError("v2 was never scored: see monitor.log")
                    await asyncio.sleep(0.1)
                first_mono, first_wall = time.monotonic(), time.time()
                while True:
                    alerts = await _alerts(client, url)
                    v1_alerts += [a for a in alerts if a["labels"].get("version") != "v2"]
                    firing = [
                        a for a in alerts
                        if a["labels"]["alertname"] == ALERT and a["state"] == "firing"
                        and a["labels"].get("version") == "v2"
                    ]  # fmt: skip
                    if firing:
                        fired_after = time.monotonic() - first_mono
                        break
                    if time.monotonic() - first_mono > timeout_s:
                        raise RuntimeError(f"{ALERT} did not fire for v2 within {timeout_s:.0f} s")
                    await asyncio.sleep(0.5)
        first = min(firing, key=lambda a: a["activeAt"])
        active_at = datetime.fromisoformat(first["activeAt"].replace("Z", "+00:00")).timestamp()
        return Detection(
            firing_after_s=fired_after,
            pending_after_s=active_at - first_wall,
            path=first["labels"].get("path", ""),
            value=float(first["value"]),
            deploy_to_first_score_s=first_mono - deployed,
            v1_alerts=v1_alerts,
        )
    finally:
        monitor.send_signal(signal.SIGTERM)
        try:
            monitor.wait(40)
        except Exception:
            monitor.kill()


async def _with_topic(workdir: Path, rate: float) -> Detection:
    topic = f"bench.ttd.{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, 3, 1) for n in (topic, f"{topic}.dlq")])
        return await measure(BOOTSTRAP, topic, workdir, rate=rate)
    finally:
        try:
            await admin.delete_topics([topic, f"{topic}.dlq"])
        finally:
            await admin.close()


def run() -> None:
    # The demo's rate, then the "one answer a second" (three claims each).
    for rate in RATES:
        with tempfile.TemporaryDirectory(prefix="citemon-ttd-") as tmp:
            d = asyncio.run(_with_topic(Path(tmp), rate))
        print(
            f"demo's bad deploy at {rate:g} answers/s, scrape + evaluation every {INTERVAL}, "
            f"shipped rules, v1 for {WARMUP_S:.0f} s first"
        )
        print(f"  deploy -> v2's first scored answer: {d.deploy_to_first_score_s:.1f} s")
        print(
            f"  {ALERT} for v2: pending after {d.pending_after_s:.0f} s, firing after "
            f"{d.firing_after_s:.0f} s (path {d.path}, accuracy {d.value:.3f}); target <= "
            f"{TARGET_S:.0f} s"
        )
        print(f"  quality alerts seen for any other version: {len(d.v1_alerts)}", flush=True)
