"""A real Prometheus (Debian's) scraping ``MetricsServer``: the whole metrics contract, live.

Checks what no unit test can: Prometheus negotiates OpenMetrics with our server and stores the
trace-ID exemplars; the recording rules, evaluated by Prometheus itself over our counters, give
the same accuracy and IDs per claim as the monitor's own windowed gauges; every dashboard query
runs without error.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from citemon._core.records import AnswerScore, ClaimResult
from citemon._metrics import Metrics, MetricsServer
from tests.conftest import REPO
from tests.integration.prometheus_support import free_port, query, run_prometheus

pytestmark = pytest.mark.integration

RULES = REPO / "grafana" / "rules" / "citemon.rules.yml"
DASHBOARD = REPO / "grafana" / "dashboards" / "citemon.json"
RULE_TIMEOUT_S = 40.0


@pytest.fixture
async def prometheus(tmp_path: Path) -> AsyncIterator[tuple[str, int]]:
    """A Prometheus on 127.0.0.1 scraping a port we then serve metrics on (1 s intervals)."""
    target_port = free_port()
    async with run_prometheus(tmp_path, RULES, target_port) as url:
        yield url, target_port


async def test_prometheus_scrapes_rules_and_exemplars(prometheus: tuple[str, int]) -> None:
    url, port = prometheus
    reg = CollectorRegistry()
    metrics = Metrics(reg)
    # Per answer: 3 correct claims citing one passage, 1 misattributed citing two, 1 uncited.
    claims = [
        *[
            ClaimResult(sentence=i, text="t", cited_ids=["p-1"], verdict="correct")
            for i in range(3)
        ],
        ClaimResult(sentence=3, text="t", cited_ids=["p-1", "p-2"], verdict="misattributed"),
        ClaimResult(sentence=4, text="t", cited_ids=[], verdict="uncited"),
    ]
    sve = {"service": "support-bot", "version": "v2", "environment": "prod"}
    stop = asyncio.Event()

    async def traffic() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            metrics.record_answer(AnswerScore(**sve, trace_id=f"{n:032x}", claims=claims))
            await asyncio.sleep(0.02)

    async with (
        MetricsServer(reg, host="127.0.0.1", port=port),
        httpx.AsyncClient(timeout=10) as client,
    ):
        task = asyncio.create_task(traffic())
        try:
            deadline = time.monotonic() + RULE_TIMEOUT_S
            while not await query(client, url, "citemon:citation_accuracy:ratio15m"):
                assert time.monotonic() < deadline, "recording rule never produced a value"
                await asyncio.sleep(0.5)
            sel = 'service="support-bot", version="v2", environment="prod"'
            for rule, gauge, expected in (
                ("citemon:citation_accuracy:ratio15m", "citemon_citation_accuracy", 0.75),
                ("citemon:citation_coverage:ratio15m", "citemon_citation_coverage", 0.8),
                ("citemon:ids_per_claim:ratio15m", "citemon_ids_per_claim", 1.25),
                ("citemon:misattributed_share:ratio15m", None, 0.25),
            ):
                (row,) = await query(client, url, f"{rule}{{{sel}}}")
                assert float(row["value"][1]) == pytest.approx(expected, abs=1e-9), rule
                if gauge:
                    (g,) = await query(client, url, f"{gauge}{{{sel}}}")
                    assert float(g["value"][1]) == pytest.approx(expected, abs=1e-9), gauge

            # Exemplars only travel in OpenMetrics: their presence proves the negotiation.
            now = time.time()
            reply = await client.get(
                f"{url}/api/v1/query_exemplars",
                params={"query": "citemon_claims_total", "start": now - 120, "end": now},
            )
            series = reply.json()["data"]
            trace_ids = {e["labels"]["trace_id"] for s in series for e in s["exemplars"]}
            assert trace_ids and all(re.fullmatch(r"[0-9a-f]{32}", t) for t in trace_ids)

            # Every dashboard query runs (values substituted as Grafana would).
            values = {"service": "support-bot", "environment": "prod", "version": "v2"}
            values |= {"__rate_interval": "30s", "__range": "1m", "__interval": "15s"}
            exprs = re.findall(r'"expr": ("(?:[^"\\]|\\.)*")', DASHBOARD.read_text())
            assert len(exprs) >= 20
            answered = 0
            for raw in exprs:
                expr = re.sub(
                    r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))",
                    lambda m: values[m.group(1) or m.group(2)],
                    json.loads(raw),
                )
                answered += bool(await query(client, url, expr))
            assert answered >= 20  # most panels have data after one scored stream
        finally:
            stop.set()
            await task
