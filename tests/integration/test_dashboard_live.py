"""Every query of the shipped Grafana dashboard, run live: does each panel show what it promises?

Grafana cannot run here, so this test does what Grafana does with the dashboard JSON: it
substitutes the template variables, sends each panel target to Prometheus's HTTP API as a range
query (time series, stat) or an instant query (``"instant": true`` tables), and reads the
result. The data is real: the fake RAG service serves v1 (mostly correct), then rolls out v2
(the first-passage bug) beside it, through the shim and a real Kafka broker; ``citemon run`` (a
subprocess, lexical judge, with a judge calibration and the shuffle canary on) scores the
answers; Debian's
Prometheus scrapes it every second and evaluates the shipped rules with their windows compressed
(15 m and 5 m → 1 m, so the recorded ratios cover the whole run).

The ground truth is the same records scored offline by the same judge. Each version's first
answer is a probe published alone and scraped before the rest: Prometheus never sees the value a
series is born with as an increase, so the counters' increases cover exactly the other answers,
and the rate panels are read at the step whose window holds that version's whole burst.
``increase()`` and ``rate()`` extrapolate to their window's edges, so counts are compared within
``COUNT_TOLERANCE``; ratios of counters scraped together are exact up to ``RATIO_TOLERANCE``.

Panels with no data under the offline judge are listed in ``NO_DATA`` with the reason, and the
test asserts they really are empty: one that starts showing data must be moved out of the list.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import pytest_asyncio
import yaml
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from citemon._core.calibration import Calibration, corrected_accuracy
from citemon._core.records import PATTERNS, AnswerRecord
from citemon._demo.service import DEMO_SERVICE, FakeRAGService
from citemon._engine.scoring import Scorer
from citemon._metrics import CITED_VERDICTS
from citemon.judges.lexical import LexicalJudge
from tests.conftest import REPO, need_server
from tests.integration.monitor_support import start_scraped_monitor
from tests.integration.prometheus_support import free_port, run_prometheus

pytestmark = pytest.mark.asyncio(loop_scope="module")

DASHBOARD: Final = REPO / "grafana" / "dashboards" / "citemon.json"
RULES: Final = REPO / "grafana" / "rules" / "citemon.rules.yml"

ENVIRONMENT: Final = "demo"  # FakeRAGService's default deployment.environment.name
VERSIONS: Final = ("v1", "v2")
#: Answers per version: one probe, then a burst of the rest.
ANSWERS: Final = 40
CALIB: Final = Calibration(judge="lexical", tp=90, fn=10, tn=75, fp=25)  # sens 0.90, spec 0.75
CANARY_RATE: Final = 0.5
#: The fake service's seed: one whose v1 burst has every v1 fault (4 misattributed, 3 uncited,
#: 4 over-broad citations), so no v1 panel is checked on zeros alone.
SEED: Final = 2

#: Prometheus scrapes (and evaluates rules) every second: ``prometheus_support``'s setting.
SCRAPE_S: Final = 1.0
#: What Grafana would put for ``$__rate_interval`` with a datasource scrape interval of 2.5 s
#: (``max($__interval + scrape, 4 × scrape)``): a window holding ~10 samples, so a burst scored
#: between two scrapes is inside it whole at the step read.
RATE_INTERVAL_S: Final = 10
#: ``$__range`` of the dashboard's default time range (``now-6h`` → ``now``).
DASHBOARD_RANGE: Final = "6h"
#: ``$__interval``: the range queries' step, as Grafana picks it for a short range.
STEP_S: Final = 1

COUNT_TOLERANCE: Final = 0.15
"""Relative error allowed on counts and rates: increase()/rate() extrapolate up to one scrape
interval at each window edge (~10% of a 10 s window)."""
RATIO_TOLERANCE: Final = 0.02
"""Absolute error allowed on ratios: numerator and denominator are scraped together, so only
the zero-point cap of extrapolation (which differs for series born at 0 and at the probe's
count) moves them apart."""

SCORED_TIMEOUT_S: Final = 40.0

GrafanaVars = dict[str, str]

NO_DATA: Final[dict[tuple[int, str], str]] = {
    (13, "A"): "the lexical judge is in-process: no judge requests, so no latency histogram",
    (13, "B"): "the lexical judge is in-process: no judge requests, so no latency histogram",
    (13, "C"): "the lexical judge is in-process: no judge requests, so no latency histogram",
    (14, "B"): "no judge requests: the recorded error ratio divides by a zero request rate",
    (15, "B"): "the in-flight cap is published only for --judge http (--judge-concurrency)",
    (16, "A"): "the lexical judge has no verdict cache: hits / lookups is 0 / 0",
    (22, "B"): "no poison messages were sent, so no dead-letter reason has a series",
}
"""Panel targets that are legitimately empty under the offline lexical judge, with why."""


# -- ground truth ----------------------------------------------------------------------------


@dataclass
class Tally:
    """Per version, the counts behind every panel, from the records scored offline."""

    answers: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    faithful: int = 0
    cited_ids: int = 0
    irrelevant: int = 0
    overlap: int = 0
    patterns: Counter[str] = field(default_factory=Counter)

    @property
    def cited(self) -> int:
        return sum(self.verdicts[v] for v in CITED_VERDICTS)

    @property
    def judged(self) -> int:
        return self.cited + self.verdicts["uncited"]

    def share(self, *verdicts: str) -> float:
        return sum(self.verdicts[v] for v in verdicts) / self.cited


async def tally(records: list[AnswerRecord]) -> Tally:
    out = Tally(answers=len(records))
    for score in await Scorer(LexicalJudge()).score_many(records):
        for claim in score.claims:
            out.verdicts[claim.verdict] += 1
            if claim.verdict == "unjudged":
                continue
            out.faithful += claim.faithful is True
            if claim.verdict in CITED_VERDICTS:
                out.cited_ids += len(claim.cited_ids)
                out.irrelevant += len(claim.irrelevant_ids)
                out.overlap += claim.verdict == "misattributed" and claim.overlap
            if claim.verdict == "misattributed":
                out.patterns[claim.pattern or "other"] += 1
    return out


# -- Grafana's side --------------------------------------------------------------------------

_VAR = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def substitute(expr: str, variables: GrafanaVars) -> str:
    """Replace ``$name`` and ``${name}`` as Grafana does (an unknown variable is a test bug)."""
    return _VAR.sub(lambda m: variables[m.group(1) or m.group(2)], expr)


def grafana_vars(version: str = ".*") -> GrafanaVars:
    """The variables for ``service`` = the demo's, ``environment`` = All, ``version``."""
    return {
        "datasource": "prometheus",
        "service": re.escape(DEMO_SERVICE).replace("\\-", "-"),
        "environment": ".*",  # "All" with the variables' allValue
        "version": version,
        "__rate_interval": f"{RATE_INTERVAL_S}s",
        "__interval": f"{STEP_S}s",
        "__range": DASHBOARD_RANGE,
    }


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return doc


def targets() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Every (panel, target) of the dashboard, rows included (collapsed rows nest panels)."""
    for panel in dashboard()["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                yield inner, target


def target(panel_id: int, ref: str) -> tuple[dict[str, Any], dict[str, Any]]:
    for panel, tgt in targets():
        if panel["id"] == panel_id and tgt["refId"] == ref:
            return panel, tgt
    raise AssertionError(f"panel {panel_id} has no target {ref}: the dashboard changed shape")


def compressed_rules(workdir: Path) -> Path:
    """The shipped rules with 15 m and 5 m windows → 1 m: longer than the whole run."""
    text = RULES.read_text(encoding="utf-8")
    text, n = re.subn(r"\[(15m|5m)\]", "[1m]", text)
    assert n >= 6, "the rules file changed shape; update this test"
    out = workdir / "rules.yml"
    out.write_text(text, encoding="utf-8")
    return out


# -- the live run ----------------------------------------------------------------------------


@dataclass
class Live:
    """The Prometheus to query, and what the run put into it."""

    url: str
    client: httpx.AsyncClient
    started: float
    """Wall-clock start of the run (before any sample): range queries start here."""
    expected: dict[str, Tally]
    """Per version, every answer (what the monitor's own window gauges see)."""
    increase: dict[str, Tally]
    """Per version, the answers after the probe (what counter increases see)."""
    burst_done: dict[str, float]
    """Per version, the timestamp of the first scrape holding all its answers."""
    first_seen: dict[str, float]
    """Per version, the timestamp of its first scrape (the deploy)."""
    partitions: int

    async def range(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._api(
            "query_range",
            {"query": expr, "start": math.floor(self.started), "end": time.time(), "step": STEP_S},
        )
        return result

    async def instant(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._api("query", {"query": expr})
        return result

    async def label_values(self, match: str, label: str) -> list[str]:
        values: list[str] = await self._api(
            f"label/{label}/values",
            {"match[]": match, "start": math.floor(self.started), "end": time.time()},
        )
        return values

    async def _api(self, path: str, params: dict[str, Any]) -> Any:
        reply = await self.client.get(f"{self.url}/api/v1/{path}", params=params)
        body = reply.json()
        assert reply.status_code == 200 and body["status"] == "success", (params, body)
        assert not body.get("warnings"), (params, body["warnings"])
        return body["data"] if path.startswith("label/") else body["data"]["result"]


async def poll(check: Callable[[], Awaitable[Any]], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = await check()
        if got:
            return got
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


async def scraped(live: Live, version: str, answers: int) -> float | None:
    """Timestamp of the latest scrape if it holds ``answers`` answers of ``version``."""
    expr = f'timestamp(citemon_answers_total{{version="{version}"}})'
    got = await live.instant(f'citemon_answers_total{{version="{version}"}} >= {answers}')
    if not got:
        return None
    (ts,) = await live.instant(expr)
    return float(ts["value"][1])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def live(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Live]:
    """One run for the module: v1, then v2, scored by ``citemon run``, scraped by Prometheus."""
    workdir = tmp_path_factory.mktemp("dashboard")
    topic = f"citemon-test.dashboard.{int(time.time() * 1000)}"
    partitions = 3
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=10000)
        calib = workdir / "lexical.calibration.json"
        CALIB.save(calib)
        rules = compressed_rules(workdir)
        port = free_port()
        started = time.time()
        monitor = start_scraped_monitor(
            kafka_bootstrap,
            topic,
            port,
            workdir / "monitor.log",
            "--calibration",
            str(calib),
            "--probe-rate",
            str(CANARY_RATE),
        )
        try:
            async with (
                run_prometheus(workdir, rules, port) as url,
                httpx.AsyncClient(timeout=10) as client,
            ):
                live = Live(url, client, started, {}, {}, {}, {}, partitions)
                await _drive(live, kafka_bootstrap, topic)
                yield live
        finally:
            code = _stop(monitor)
        # SIGTERM drains and exits 0 (checked only when the run itself got through).
        assert code == 0, (workdir / "monitor.log").read_text()[-3000:]
    finally:
        with contextlib.suppress(Exception):
            await admin.delete_topics([topic, f"{topic}.dlq"], timeout_ms=10000)
        await admin.close()


async def _drive(live: Live, bootstrap: str, topic: str) -> None:
    """A canary rollout: v1 serves, v2 rolls out beside it, then both answer a burst each.

    Each version's first answer (the probe) makes its series before the bursts, and the bursts
    wait until every series is a rate window old: a rate over a window longer than a series'
    life is extrapolated from a few samples, which is Prometheus, not the dashboard.
    """
    service = FakeRAGService(bootstrap, topic, seed=SEED, batch_delay_ms=50)
    probes: dict[str, AnswerRecord] = {}
    try:
        for version in VERSIONS:
            service.deploy(version, first_passage_bug=version == "v2")
            probes[version] = await asyncio.to_thread(service.handle)
            assert await asyncio.to_thread(service.flush), "spans were not all exported"
            live.first_seen[version] = await poll(
                lambda v=version: scraped(live, v, 1),  # type: ignore[misc]
                SCORED_TIMEOUT_S,
                f"Prometheus to scrape {version}'s first answer",
            )
        await asyncio.sleep(max(0.0, live.first_seen[VERSIONS[-1]] + RATE_INTERVAL_S - time.time()))
        for version in VERSIONS:
            service.deploy(version, first_passage_bug=version == "v2")
            burst = [await asyncio.to_thread(service.handle) for _ in range(ANSWERS - 1)]
            assert await asyncio.to_thread(service.flush), "spans were not all exported"
            live.burst_done[version] = await poll(
                lambda v=version: scraped(live, v, ANSWERS),  # type: ignore[misc]
                SCORED_TIMEOUT_S,
                f"Prometheus to scrape all {ANSWERS} answers of {version}",
            )
            live.expected[version] = await tally([probes[version], *burst])
            live.increase[version] = await tally(burst)
    finally:
        await asyncio.to_thread(service.shutdown)
    # The last burst's step is complete, and every rule group has evaluated on it.
    last = max(live.burst_done.values()) + max(STEP_S, SCRAPE_S)
    await poll(lambda: rules_evaluated_after(live, last), SCORED_TIMEOUT_S, "the rules to evaluate")


async def rules_evaluated_after(live: Live, when: float) -> bool:
    """Whether Prometheus has evaluated every rule group at a time after ``when``."""
    reply = await live.client.get(f"{live.url}/api/v1/rules")
    groups = reply.json()["data"]["groups"]
    assert groups, "Prometheus loaded no rule group"
    return time.time() > when and all(
        datetime.fromisoformat(g["lastEvaluation"]).timestamp() > when for g in groups
    )


def _stop(monitor: subprocess.Popen[bytes]) -> int:
    monitor.send_signal(signal.SIGTERM)
    try:
        return monitor.wait(40)
    except subprocess.TimeoutExpired:
        monitor.kill()
        monitor.wait()
        raise


# -- reading results -------------------------------------------------------------------------


def values(series: dict[str, Any]) -> list[tuple[float, float]]:
    return [(float(t), float(v)) for t, v in series["values"]]


def at(series: dict[str, Any], when: float) -> float:
    """The series' value at the first step at or after ``when`` (a scrape timestamp)."""
    for t, v in values(series):
        if t >= when:
            return v
    raise AssertionError(f"{series['metric']} has no step at or after {when}")


def last(series: dict[str, Any]) -> float:
    return values(series)[-1][1]


def by_version(result: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {s["metric"].get("version", ""): s for s in result}
    assert len(out) == len(result), f"more than one series per version: {result}"
    return out


def close(got: float, want: float, *, rel: float = 0.0, abs_: float = 0.0) -> bool:
    return math.isclose(got, want, rel_tol=rel, abs_tol=abs_)


# -- the tests -------------------------------------------------------------------------------


async def test_every_target_is_covered_here() -> None:
    """Every panel target is checked below or listed in NO_DATA: a new panel needs a check."""
    checked = {
        (2, "A"), (2, "B"), (2, "C"), (3, "A"), (4, "A"), (5, "A"), (7, "A"), (8, "A"), (9, "A"),
        (10, "A"), *((11, r) for r in "ABCDEFG"), (14, "A"), (15, "A"), (17, "A"), (18, "A"),
        (20, "A"), (20, "B"), (21, "A"), (22, "A"), (23, "A"), (24, "A"), (25, "A"),
        (26, "A"), (26, "B"), (27, "A"), (27, "B"), (28, "A"), (28, "B"),
        *((29, r) for r in "ABC"), *((30, r) for r in "ABC"),
    }  # fmt: skip
    every = {(p["id"], t["refId"]) for p, t in targets()}
    assert every == checked | set(NO_DATA), every ^ (checked | set(NO_DATA))
    assert not checked & set(NO_DATA)


async def test_template_variables(live: Live) -> None:
    """``label_values(...)`` as Grafana asks it: the labels API with the query as ``match[]``."""
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    chosen = grafana_vars()
    want = {"service": [DEMO_SERVICE], "environment": [ENVIRONMENT], "version": list(VERSIONS)}
    for name, expected in want.items():
        query = variables[name]["query"]["query"]
        assert query == variables[name]["definition"], name
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", substitute(query, chosen))
        assert m and m.group(2) == name, query
        assert await live.label_values(m.group(1), name) == expected, name


async def test_quality_panels_show_each_version(live: Live) -> None:
    """Accuracy, coverage, IDs per claim and faithfulness: the recorded ratios, per version."""
    want: dict[int, Callable[[Tally], float]] = {
        2: lambda t: t.verdicts["correct"] / t.cited,
        3: lambda t: t.cited / t.judged,
        4: lambda t: t.cited_ids / t.cited,
        5: lambda t: t.faithful / t.judged,
    }
    for panel_id, ratio in want.items():
        panel, tgt = target(panel_id, "A")
        series = by_version(await live.range(substitute(tgt["expr"], grafana_vars())))
        assert set(series) == set(VERSIONS), (panel["title"], series.keys())
        for version, s in series.items():
            assert s["metric"]["service"] == DEMO_SERVICE
            assert s["metric"]["environment"] == ENVIRONMENT
            got, exact = last(s), ratio(live.increase[version])
            assert close(got, exact, abs_=RATIO_TOLERANCE), (panel["title"], version, got, exact)
    accuracy = by_version(await live.range(substitute(target(2, "A")[1]["expr"], grafana_vars())))
    assert last(accuracy["v1"]) > 0.8
    assert last(accuracy["v2"]) < 0.5
    # The fast path's 5-minute line (compressed like the 15-minute one: the same whole run).
    fast = by_version(await live.range(substitute(target(2, "C")[1]["expr"], grafana_vars())))
    assert set(fast) == set(VERSIONS)
    for version, s in fast.items():
        exact = live.increase[version].verdicts["correct"] / live.increase[version].cited
        assert close(last(s), exact, abs_=RATIO_TOLERANCE), (version, last(s), exact)


async def test_evidence_panels_show_each_versions_drop_and_its_z(live: Live) -> None:
    """Panels 27 and 28, what CitationAccuracyDrop's slow path pages on: each version's drop
    below its service's 1-day level (here the whole run, both versions pooled) and that drop in
    standard errors. v2, the first-passage bug, is far below and far out; v1 is above."""
    tallies = live.increase.values()
    day = sum(t.verdicts["correct"] for t in tallies) / sum(t.cited for t in tallies)
    for ref in "AB":  # the 15- and 5-minute windows (both compressed to the whole run)
        drops = by_version(await live.range(substitute(target(27, ref)[1]["expr"], grafana_vars())))
        assert set(drops) == set(VERSIONS), drops.keys()
        for version, s in drops.items():
            t = live.increase[version]
            exact = day - t.verdicts["correct"] / t.cited
            assert close(last(s), exact, abs_=RATIO_TOLERANCE), (ref, version, last(s), exact)
        z = by_version(await live.range(substitute(target(28, ref)[1]["expr"], grafana_vars())))
        assert set(z) == set(VERSIONS), z.keys()
        assert last(z["v2"]) > 5 and last(z["v1"]) < 0, (ref, last(z["v1"]), last(z["v2"]))


async def test_corrected_accuracy_pools_the_recorded_window(live: Live) -> None:
    """Panel 2's dashed line: Rogan–Gladen on the recorded accuracy (all replicas summed), from
    the calibration the monitor exports; the monitor's own per-replica gauge is still there."""
    _, tgt = target(2, "B")
    corrected = by_version(await live.range(substitute(tgt["expr"], grafana_vars())))
    accuracy = by_version(await live.range(substitute(target(2, "A")[1]["expr"], grafana_vars())))
    sens, spec = CALIB.confusion.sensitivity, CALIB.confusion.specificity
    assert (sens, spec) == (0.9, 0.75)
    assert set(corrected) == set(VERSIONS)
    for version, s in corrected.items():
        want = min(1.0, max(0.0, (last(accuracy[version]) + spec - 1) / (sens + spec - 1)))
        assert close(last(s), want, abs_=1e-9), (version, last(s), want)
    gauge = by_version(await live.range("citemon_citation_accuracy_corrected"))
    assert set(gauge) == set(VERSIONS)
    for version, s in gauge.items():
        t = live.expected[version]
        got = corrected_accuracy(t.verdicts["correct"], t.cited, CALIB, draws=1)
        assert got is not None
        assert close(last(s), got[0], abs_=1e-9), (version, last(s), got[0])


async def test_failure_panels_per_version(live: Live) -> None:
    """The rate panels, read at the step whose window holds the version's whole burst."""
    v1 = live.increase["v1"]
    assert v1.irrelevant and v1.verdicts["misattributed"] and v1.verdicts["uncited"], SEED
    for version in VERSIONS:
        chosen = grafana_vars(version)
        t, when = live.increase[version], live.burst_done[version]

        _, mix = target(7, "A")
        result = await live.range(substitute(mix["expr"], chosen))
        shares = {s["metric"]["verdict"]: at(s, when) for s in result}
        assert set(shares) == {"misattributed", "unsupported", "multi_hop", "dangling"}, shares
        for verdict, share in shares.items():
            assert close(share, t.share(verdict), abs_=RATIO_TOLERANCE), (version, verdict)

        _, failed = target(8, "A")
        result = await live.range(substitute(failed["expr"], chosen))
        rates = {s["metric"]["verdict"]: at(s, when) for s in result}
        assert {s["metric"]["version"] for s in result} == {version}
        for verdict in ("misattributed", "unsupported"):
            want = t.verdicts[verdict] / RATE_INTERVAL_S
            assert close(rates[verdict], want, rel=COUNT_TOLERANCE), (version, verdict, rates)

        _, broad = target(9, "A")
        (s,) = await live.range(substitute(broad["expr"], chosen))
        assert s["metric"] == {"version": version}
        assert close(at(s, when), t.irrelevant / t.cited, abs_=RATIO_TOLERANCE)

        _, overlap = target(10, "A")
        (s,) = await live.range(substitute(overlap["expr"], chosen))
        assert s["metric"] == {"version": version}
        assert close(at(s, when), t.overlap / t.verdicts["misattributed"], abs_=RATIO_TOLERANCE)

        _, unjudged = target(18, "A")
        (s,) = await live.range(substitute(unjudged["expr"], chosen))
        assert s["metric"] == {"version": version}
        assert at(s, when) == t.verdicts["unjudged"] == 0

        _, answers = target(22, "A")
        (s,) = await live.range(substitute(answers["expr"], chosen))
        assert s["metric"] == {"version": version}
        assert close(at(s, when), (ANSWERS - 1) / RATE_INTERVAL_S, rel=COUNT_TOLERANCE)
    # The bug is visible where it should be: v2's failed citations are misattributions.
    assert (
        live.increase["v2"].share("misattributed")
        > 0.5
        > live.increase["v1"].share("misattributed")
    )


async def test_why_citations_fail_and_the_ceiling_per_version(live: Live) -> None:
    """Panel 29: each version's misattribution-pattern mix (A), the rest of the service's (B) and
    the service's day (C); panel 30: accuracy (A) against the multi-hop ceiling (B, C); each read
    at the step whose window holds both versions' bursts, against the claims scored offline."""
    when = max(live.burst_done.values())
    tallies = live.increase
    pooled: Counter[str] = sum((t.patterns for t in tallies.values()), Counter())
    assert tallies["v2"].patterns["first_retrieved"] == tallies["v2"].verdicts["misattributed"]

    def shares(result: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
        return {
            (s["metric"].get("version", "*"), s["metric"]["pattern"]): at(s, when) for s in result
        }

    mix = shares(await live.range(substitute(target(29, "A")[1]["expr"], grafana_vars())))
    rest = shares(await live.range(substitute(target(29, "B")[1]["expr"], grafana_vars())))
    day = {  # the day's share, read at the last step (its window holds every burst)
        s["metric"]["pattern"]: last(s)
        for s in await live.range(substitute(target(29, "C")[1]["expr"], grafana_vars()))
    }
    for version, t in tallies.items():
        (other,) = (v for v in tallies if v != version)
        m, o = sum(t.patterns.values()), sum(tallies[other].patterns.values())
        for pattern in PATTERNS:
            want = t.patterns[pattern] / m
            assert close(mix[(version, pattern)], want, abs_=RATIO_TOLERANCE), (version, pattern)
            want = tallies[other].patterns[pattern] / o
            assert close(rest[(version, pattern)], want, abs_=RATIO_TOLERANCE), (version, pattern)
    for pattern in PATTERNS:
        want = pooled[pattern] / sum(pooled.values())
        assert close(day[pattern], want, abs_=RATIO_TOLERANCE), (pattern, day)
    assert mix[("v2", "first_retrieved")] == max(v for (ver, _), v in mix.items() if ver == "v2")

    accuracy = by_version(await live.range(substitute(target(30, "A")[1]["expr"], grafana_vars())))
    ceiling = by_version(await live.range(substitute(target(30, "B")[1]["expr"], grafana_vars())))
    (service_day,) = await live.range(substitute(target(30, "C")[1]["expr"], grafana_vars()))
    for version, t in tallies.items():
        want = t.verdicts["correct"] / t.cited
        assert close(at(accuracy[version], when), want, abs_=RATIO_TOLERANCE), version
        want = 1 - t.verdicts["multi_hop"] / t.cited
        assert close(at(ceiling[version], when), want, abs_=RATIO_TOLERANCE), version
        assert at(accuracy[version], when) <= at(ceiling[version], when) + RATIO_TOLERANCE
    multi_hop = sum(t.verdicts["multi_hop"] for t in tallies.values())
    want = 1 - multi_hop / sum(t.cited for t in tallies.values())
    assert close(at(service_day, when), want, abs_=RATIO_TOLERANCE)


async def test_comparison_table_has_one_row_per_version(live: Live) -> None:
    """Panel 11: seven instant queries merged on their labels into one row per version."""
    panel, _ = target(11, "A")
    columns: dict[str, Callable[[Tally], float]] = {
        "A": lambda t: t.verdicts["correct"] / t.cited,
        "B": lambda t: t.cited / t.judged,
        "C": lambda t: t.cited_ids / t.cited,
        "D": lambda t: t.faithful / t.judged,
        "E": lambda t: t.share("misattributed"),
        "F": lambda t: t.cited,
        "G": lambda t: t.answers,
    }
    rows: dict[tuple[str, ...], dict[str, float]] = {}
    for tgt in panel["targets"]:
        assert tgt["instant"] and tgt["format"] == "table", tgt["refId"]
        result = await live.instant(substitute(tgt["expr"], grafana_vars()))
        keys = {tuple(sorted(s["metric"].items())) for s in result}
        assert len(keys) == len(result) == len(VERSIONS), (tgt["refId"], result)
        for s in result:
            key = (s["metric"]["service"], s["metric"]["version"], s["metric"]["environment"])
            assert set(s["metric"]) == {"service", "version", "environment"}, tgt["refId"]
            rows.setdefault(key, {})[tgt["refId"]] = float(s["value"][1])
    assert sorted(rows) == [(DEMO_SERVICE, v, ENVIRONMENT) for v in VERSIONS]
    for (_, version, _), row in rows.items():
        assert set(row) == set(columns), row  # every column filled: the merge makes one row
        t = live.increase[version]
        for ref, want in columns.items():
            if ref in "FG":  # counts: increase() extrapolates to the range's edges
                assert close(row[ref], want(t), rel=COUNT_TOLERANCE), (version, ref, row)
            else:
                assert close(row[ref], want(t), abs_=RATIO_TOLERANCE), (version, ref, row)
    assert rows[(DEMO_SERVICE, "v1", ENVIRONMENT)]["A"] > 0.8
    assert rows[(DEMO_SERVICE, "v2", ENVIRONMENT)]["A"] < 0.5


async def test_deploys_annotation_marks_each_version_once(live: Live) -> None:
    """The annotation query's series for v2 starts at v2's first scrape, and only there."""
    (annotation,) = [a for a in dashboard()["annotations"]["list"] if "expr" in a]
    expr = substitute(annotation["expr"], grafana_vars())
    series = by_version(await live.range(expr))
    assert set(series) == set(VERSIONS), series.keys()
    for version, s in series.items():
        assert {"service", "environment", "version"} <= set(s["metric"])
        steps = [t for t, _ in values(s)]
        # Grafana turns each run of consecutive steps into one annotation at its first step.
        assert steps[0] == pytest.approx(live.first_seen[version], abs=STEP_S), version
        assert all(b - a == STEP_S for a, b in itertools.pairwise(steps)), version
    assert values(series["v2"])[0][0] > values(series["v1"])[0][0]
    # At the annotation's own step (1 m, on Grafana's step-aligned grid, as drawn at the next
    # refresh) each deploy is exactly one point: the first step at or after its first scrape.
    step = int(annotation["step"].removesuffix("m")) * 60
    start = math.floor(live.started / step) * step
    reply = await live.client.get(
        f"{live.url}/api/v1/query_range",
        params={"query": expr, "start": start, "end": start + 2 * step, "step": step},
    )
    coarse = by_version(reply.json()["data"]["result"])
    for version in VERSIONS:
        (point,) = values(coarse[version])
        assert point[0] == math.ceil(live.first_seen[version] / step) * step, version
    text = annotation["textFormat"]
    assert set(re.findall(r"\{\{(\w+)\}\}", text)) <= set(series["v2"]["metric"])


async def test_judge_panels(live: Live) -> None:
    """Judge panels with data under the lexical judge; the empty ones are in NO_DATA."""
    _, errors = target(14, "A")
    result = await live.range(substitute(errors["expr"], grafana_vars()))
    assert {s["metric"]["outcome"] for s in result} == {
        "error",
        "timeout",
        "rate_limited",
        "invalid",
    }
    assert all(v == 0 for s in result for _, v in values(s)), "an offline judge never fails"

    _, inflight = target(15, "A")
    (s,) = await live.range(substitute(inflight["expr"], grafana_vars()))
    assert all(v == 0 for _, v in values(s))

    _, canary = target(17, "A")
    (s,) = await live.range(substitute(canary["expr"], grafana_vars()))
    assert 0.5 < last(s) <= 1.0, "the lexical judge tells shuffled citations apart"


def unit(panel: dict[str, Any], ref: str) -> str | None:
    """The unit Grafana draws ``ref``'s series in: the panel's, unless an override names it."""
    field_config = panel.get("fieldConfig", {})
    found: str | None = field_config.get("defaults", {}).get("unit")
    for override in field_config.get("overrides", []):
        if override["matcher"] == {"id": "byFrameRefID", "options": ref}:
            for prop in override["properties"]:
                if prop["id"] == "unit":
                    found = prop["value"]
    return found


#: Panels whose values have a sign: the drop below the service's day and its z-score (a version
#: better than the day reads negative).
SIGNED_PANELS: Final = {27, 28}

WITH_DATA: Final = sorted(
    (p["id"], t["refId"]) for p, t in targets() if (p["id"], t["refId"]) not in NO_DATA
)


@pytest.mark.parametrize(("panel_id", "ref"), WITH_DATA)
async def test_target_has_data_its_legend_and_unit_fit(live: Live, panel_id: int, ref: str) -> None:
    """Every other target answers with series that carry the labels its legend names, and
    values its unit can show (a share in 0..1, never a negative rate)."""
    panel, tgt = target(panel_id, ref)
    expr = substitute(tgt["expr"], grafana_vars())
    result = await (live.instant(expr) if tgt.get("instant") else live.range(expr))
    assert result, f"{panel['title']} {ref}: no data"
    legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", tgt.get("legendFormat", "")))
    for s in result:
        assert legend <= set(s["metric"]), (panel["title"], ref, legend, s["metric"])
        points = [float(s["value"][1])] if "value" in s else [v for _, v in values(s)]
        points = [v for v in points if not math.isnan(v)]
        assert points, (panel["title"], ref, s["metric"])
        if panel_id not in SIGNED_PANELS:
            assert min(points) >= 0, (panel["title"], ref)
        if unit(panel, ref) == "percentunit":
            # Ratios of two counters, each extrapolated on its own by increase()/rate(), can
            # read a little over 1 right after a deploy (faithfulness read 100.7%); the rule and
            # the panels clamp them, so a share never shows above 100%.
            assert max(points) <= 1, (panel["title"], ref, max(points))
    # Series differ in their labels, else Grafana draws look-alike lines under one legend.
    keys = [tuple(sorted(s["metric"].items())) for s in result]
    assert len(set(keys)) == len(keys)


async def test_exemplars_link_v2_failures_to_traces(live: Live) -> None:
    """Panels that ask for exemplars get trace IDs of answers of the version shown."""
    (panel,) = [p for p, t in targets() if p["id"] == 8]
    tgt = panel["targets"][0]
    assert tgt["exemplar"]
    reply = await live.client.get(
        f"{live.url}/api/v1/query_exemplars",
        params={
            "query": substitute(tgt["expr"], grafana_vars("v2")),
            "start": math.floor(live.started),
            "end": time.time(),
        },
    )
    body = reply.json()
    assert body["status"] == "success", body
    seen = [(s["seriesLabels"], e) for s in body["data"] for e in s["exemplars"]]
    assert seen, "no exemplars for v2's misattributed claims"
    for labels, exemplar in seen:
        assert labels["version"] == "v2" and labels["verdict"] in ("misattributed", "unsupported")
        assert re.fullmatch(r"[0-9a-f]{32}", exemplar["labels"]["trace_id"]), exemplar


@pytest.mark.parametrize(("panel_id", "ref"), sorted(NO_DATA))
async def test_panels_empty_offline(live: Live, panel_id: int, ref: str) -> None:
    _, tgt = target(panel_id, ref)
    result = await live.range(substitute(tgt["expr"], grafana_vars()))
    points = [v for s in result for _, v in values(s) if not math.isnan(v)]
    assert not points, f"now has data, move it out of NO_DATA: {result}"


async def test_pipeline_panels(live: Live) -> None:
    _, lag = target(20, "A")
    result = await live.range(substitute(lag["expr"], grafana_vars()))
    assert sorted(int(s["metric"]["partition"]) for s in result) == list(range(live.partitions))
    assert all(last(s) == 0 for s in result), "every answer was consumed"

    _, total = target(20, "B")
    (s,) = await live.range(substitute(total["expr"], grafana_vars()))
    assert s["metric"]["job"] == "citemon" and "topic" in s["metric"]
    assert last(s) == 0

    _, spans = target(21, "A")
    result = await live.range(substitute(spans["expr"], grafana_vars()))
    outcomes = {s["metric"]["outcome"]: s for s in result}
    assert set(outcomes) == {"answer", "sampled_out", "skipped", "invalid", "part", "unkeyed"}
    when = live.burst_done["v1"]  # v1's burst (and perhaps v2's probe) in the window
    assert close(at(outcomes["answer"], when), (ANSWERS - 1) / RATE_INTERVAL_S, rel=COUNT_TOLERANCE)
    assert at(outcomes["sampled_out"], when) == at(outcomes["invalid"], when) == 0
    assert at(outcomes["part"], when) == 0  # the demo's answers are one span each

    _, up = target(23, "A")
    (s,) = await live.range(substitute(up["expr"], grafana_vars()))
    assert last(s) == 1

    # The demo's spans are self-contained (no multi-span traces) and the lexical judge never
    # fails or hits the call bound: every outcome and cause is there, at 0.
    _, traces = target(25, "A")
    result = await live.range(substitute(traces["expr"], grafana_vars()))
    assert {s["metric"]["outcome"]: last(s) for s in result} == dict.fromkeys(
        (
            "completed",
            "settled",
            "dropped_incomplete",
            "evicted",
            "superseded",
            "unrecognized",
            "no_passages",
            "no_answer",
            "no_content",
            "citations_not_recorded",
        ),
        0,
    )
    _, causes = target(26, "A")
    result = await live.range(substitute(causes["expr"], grafana_vars()))
    assert {s["metric"]["cause"]: last(s) for s in result} == dict.fromkeys(
        ("judge_failure", "truncated", "search_cut", "no_passage_text", "passage_lookup_failed"), 0
    )
    _, cut = target(26, "B")
    (s,) = await live.range(substitute(cut["expr"], grafana_vars()))
    assert last(s) == 0

    _, build = target(24, "A")
    assert build["instant"] and build["format"] == "table"
    (row,) = await live.instant(substitute(build["expr"], grafana_vars()))
    assert row["metric"]["version"] and row["metric"]["job"] == "citemon"
    assert float(row["value"][1]) == 1


async def test_monitor_restart_is_not_a_deploy(tmp_path: Path) -> None:
    """The Deploys query, with promtool's exact staleness: a citemon restart is no deploy.

    A restarting monitor is not scraped for a while (Prometheus marks its series stale) and
    re-creates a version's series only when it scores that version again. The query used to
    compare with the instant 1 m earlier, so a gap there made every version a "deploy"; it now
    asks whether the version was seen at all in the hour before.
    """
    promtool = shutil.which("promtool")
    if promtool is None:
        need_server("promtool", "install Debian's prometheus package (`make tools`)")
        raise AssertionError  # unreachable
    (annotation,) = [a for a in dashboard()["annotations"]["list"] if "expr" in a]
    expr = substitute(annotation["expr"], grafana_vars())

    def at(minutes: str, *versions: str) -> dict[str, Any]:
        samples = [
            {
                "labels": f'{{service="{DEMO_SERVICE}", environment="prod", version="{v}"}}',
                "value": 1,
            }
            for v in versions
        ]
        return {"expr": expr, "eval_time": minutes, "exp_samples": samples}

    series = 'citemon_answers_total{{service="{}", environment="prod", version="{}"}}'
    doc = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    # v1 from 0 m; citemon restarts at 10 m: three failed scrapes, then v1 again.
                    {
                        "series": series.format(DEMO_SERVICE, "v1"),
                        "values": "1+1x39 stale stale stale 1+1x80",
                    },
                    # v2 rolls out at 20 m.
                    {"series": series.format(DEMO_SERVICE, "v2"), "values": "_x80 1+1x40"},
                ],
                "promql_expr_test": [
                    at("0m", "v1"),
                    at("1m"),
                    *(at(f"{m}m") for m in (10, 11, 12)),  # the restart: no deploy
                    at("11m30s"),
                    at("20m", "v2"),
                    at("21m"),
                ],
            }
        ],
    }
    path = tmp_path / "deploys.test.yml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    done = await asyncio.to_thread(
        subprocess.run,
        [promtool, "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
