"""The rollout gates on live traffic: the demo's v1 -> v2 through Kafka, ``citemon run`` and
Debian's Prometheus with the shipped rules (1 s scrapes; the gates read the 15-minute recording
rules, which hold everything this short run sent). Each template's query is sent to Prometheus
as Argo Rollouts and Flagger send it, and its result judged as they judge it
(tests/rollout_gates.py): v2, the first-passage bug, must fail both; v1 must pass both; a
version with no claims must be neither (Argo: Inconclusive, Flagger: no values, halt).
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.integration.demo_traffic import Traffic
from tests.integration.monitor_support import start_scraped_monitor
from tests.integration.prometheus_support import free_port, query, run_prometheus
from tests.rollout_gates import (
    argo_metrics,
    argo_phase,
    example_thresholds,
    flagger_check,
    flagger_templates,
    render_argo,
    render_flagger,
)

RULES = REPO / "grafana" / "rules" / "citemon.rules.yml"
#: Cited claims per version before the gates are asked (the guard is 100).
ENOUGH = 150
RATE = 20.0


async def cited(client: httpx.AsyncClient, url: str, version: str) -> float:
    result = await query(client, url, f'citemon:cited_claims:increase15m{{version="{version}"}}')
    return max((float(r["value"][1]) for r in result), default=0.0)


async def wait_for_claims(client: httpx.AsyncClient, url: str, version: str) -> None:
    deadline = time.monotonic() + 90
    while await cited(client, url, version) < ENOUGH:
        if time.monotonic() > deadline:
            pytest.fail(f"{version} never reached {ENOUGH} cited claims in Prometheus")
        await asyncio.sleep(1.0)


async def argo(
    client: httpx.AsyncClient, url: str, canary: str, at: float
) -> list[tuple[str, Any, str]]:
    out = []
    for metric in argo_metrics():
        args = {"service": "support-bot", "environment": "demo", "canary-version": canary}
        q = render_argo(metric["provider"]["prometheus"]["query"], args)
        values = [float(r["value"][1]) for r in await query(client, url, q, at)]
        out.append((metric["name"], values, argo_phase(metric, values)))
    return out


async def flagger(
    client: httpx.AsyncClient, url: str, canary: str, at: float
) -> list[tuple[str, Any, str]]:
    out = []
    variables = {"service": "support-bot", "environment": "demo", "canary_version": canary}
    for name, doc in flagger_templates().items():
        q = render_flagger(doc["spec"]["query"], variables)
        values = [float(r["value"][1]) for r in await query(client, url, q, at)]
        out.append((name, values, flagger_check(values, example_thresholds()[name])))
    return out


async def test_gates_fail_v2_and_pass_v1_on_live_traffic(
    tmp_path: Path, kafka_bootstrap: str, kafka_topic: Any
) -> None:
    topic = await kafka_topic(partitions=3)
    port = free_port()
    monitor = start_scraped_monitor(kafka_bootstrap, topic, port, tmp_path / "monitor.log")
    try:
        async with (
            run_prometheus(tmp_path, RULES, port) as url,
            httpx.AsyncClient(timeout=10) as client,
        ):
            with Traffic(kafka_bootstrap, topic, RATE) as traffic:
                await wait_for_claims(client, url, "v1")
                traffic.service.deploy("v2", first_passage_bug=True)
                await wait_for_claims(client, url, "v2")
            # One evaluation time for every query: Argo's and Flagger's must read the same
            # samples (the counters move on while the monitor drains).
            at = time.time()
            results = {c: (await argo(client, url, c, at), await flagger(client, url, c, at))
                       for c in ("v1", "v2", "v9")}  # fmt: skip
    finally:
        monitor.send_signal(signal.SIGTERM)
        try:
            monitor.wait(40)
        except Exception:
            monitor.kill()
            raise
    for canary, (a, f) in results.items():  # the README quotes these lines
        for name, values, verdict in [*a, *f]:
            shown = ", ".join(f"{v:.3g}" for v in values) or "no result"
            print(f"canary {canary}  {name:40} [{shown}]  -> {verdict}")

    v1_argo, v1_flagger = results["v1"]
    v2_argo, v2_flagger = results["v2"]
    assert [p for *_, p in v2_argo] == ["Failed", "Failed"], v2_argo
    assert [p for *_, p in v2_flagger] == ["fail", "fail"], v2_flagger
    assert [p for *_, p in v1_argo] == ["Successful", "Successful"], v1_argo
    assert [p for *_, p in v1_flagger] == ["pass", "pass"], v1_flagger
    # The numbers behind them: v2 cites the first passage, one claim in three is right; the
    # sequential test's always-valid p-value leaves no doubt about v2, and v1 (better than the
    # rest) gets no evidence against it at all.
    (v2_floor,), (v2_p,) = v2_argo[0][1], v2_argo[1][1]
    (v1_floor,), (v1_p,) = v1_argo[0][1], v1_argo[1][1]
    assert abs(v2_floor - 1 / 3) < 0.02 and v1_floor > 0.9, (v1_floor, v2_floor)
    assert v2_p < 1e-6 and v1_p == 1.0, (v1_p, v2_p)
    # Both tools read the very same numbers.
    assert [v for _, v, _ in v2_argo] == [v for _, v, _ in v2_flagger]
    # A version with no claims: no result, so neither pass nor fail.
    assert [p for *_, p in results["v9"][0]] == ["Inconclusive", "Inconclusive"]
    assert [p for *_, p in results["v9"][1]] == ["no values", "no values"]
    assert monitor.returncode == 0, (tmp_path / "monitor.log").read_text()[-3000:]
