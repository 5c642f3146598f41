"""Helpers for the ``citemon run`` tests on the real broker: run monitors, publish, read back."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer
from prometheus_client import CollectorRegistry

from citemon._core.records import AnswerRecord
from citemon._demo.service import FakeRAGService
from citemon._engine.scoring import Scorer
from citemon._metrics import MetricsServer
from citemon._service.kafka import KafkaClients
from citemon._service.monitor import build_monitor
from citemon._service.pipeline import Pipeline, PipelineStats
from citemon._service.settings import Settings
from citemon.cli import build_parser
from citemon.judges.lexical import LexicalJudge
from tests.conftest import REPO

__all__ = [
    "Monitor",
    "expected_verdicts",
    "metric_sum",
    "publish",
    "read_topic",
    "run_monitor",
    "scored_at_exit",
    "scrape",
    "start_process",
    "verdicts_by_version",
    "wait_for",
]

PYTHON = str(REPO / ".venv" / "bin" / "python")


def settings_for(
    bootstrap: str, topic: str, judge_flags: Sequence[str] = ("--judge", "lexical"), **fields: Any
) -> Settings:
    """Settings for a test monitor (metrics on a free port, fast lag updates), its judge and
    scoring parts from ``judge_flags`` (any ``citemon run`` flags)."""
    args = build_parser().parse_args(["run", *judge_flags])
    base: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "topic": topic,
        "group": f"g.{topic}",
        "dlq_topic": f"{topic}.dlq",
        "metrics_port": 0,
        "metrics_host": "127.0.0.1",
        "lag_interval_s": 0.3,
        "commit_interval_s": 0.2,
        "budget_per_minute": 0,
    }
    base.update(fields)
    return Settings.from_args(args, **base)


@dataclass
class Monitor:
    """A monitor running in this event loop."""

    pipeline: Pipeline
    server: MetricsServer
    registry: CollectorRegistry
    task: asyncio.Task[PipelineStats]
    stop: asyncio.Event


@contextlib.asynccontextmanager
async def run_monitor(
    settings: Settings, *, clients: KafkaClients | None = None
) -> AsyncIterator[Monitor]:
    """The monitor ``settings`` describe, built and served in this event loop (``clients``:
    its Kafka clients, aiokafka's by default); yielded once it serves (``wait_serving``)."""
    registry = CollectorRegistry()
    stop = asyncio.Event()
    built = build_monitor(settings, clients=clients, registry=registry)
    task = asyncio.create_task(built.serve(stop))
    try:
        await asyncio.wait_for(built.wait_serving(), 30)  # raises the start-up error
    except BaseException:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)  # its error is the one raised
        raise
    monitor = Monitor(built.pipeline, built.server, registry, task, stop)
    try:
        yield monitor
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


def publish(
    bootstrap: str, topic: str, plan: Sequence[tuple[str, int, bool]], *, seed: int = 0
) -> list[AnswerRecord]:
    """Answer with the fake RAG service: ``plan`` is ``(version, answers, first_passage_bug)``."""
    service = FakeRAGService(bootstrap, topic, seed=seed, batch_delay_ms=50)
    sent: list[AnswerRecord] = []
    try:
        for version, n, bug in plan:
            service.deploy(version, first_passage_bug=bug)
            sent += [service.handle() for _ in range(n)]
        assert service.flush(), "spans were not all exported"
    finally:
        service.shutdown()
    return sent


async def expected_verdicts(
    records: Sequence[AnswerRecord], scorer: Scorer | None = None
) -> dict[str, Counter[str]]:
    """Per version, the claim verdicts the same judge gives offline (the ground truth here)."""
    scorer = scorer or Scorer(LexicalJudge())
    out: dict[str, Counter[str]] = {}
    for score in await scorer.score_many(records):
        counter = out.setdefault(score.version or "", Counter())
        counter.update(c.verdict for c in score.claims)
    return out


def verdicts_by_version(*registries: CollectorRegistry) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for registry in registries:
        for metric in registry.collect():
            if metric.name != "citemon_claims":
                continue
            for sample in metric.samples:
                if sample.name == "citemon_claims_total" and sample.value:
                    counter = out.setdefault(sample.labels["version"], Counter())
                    counter[sample.labels["verdict"]] += int(sample.value)
    return out


def metric_sum(registry: CollectorRegistry, name: str, **labels: str) -> float:
    total = 0.0
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


async def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, step_s: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(step_s)


async def read_topic(bootstrap: str, topic: str, *, committed_only: bool = True) -> list[Any]:
    """Every record of ``topic`` up to its end now (``read_committed`` by default: up to the last
    stable offset; else the high watermark). Reads to the end offsets, never "until quiet"."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed" if committed_only else "read_uncommitted",
    )
    await consumer.start()
    records: list[Any] = []
    try:
        if topic not in await consumer.topics():
            return []  # never written to (a dead-letter topic with no dead letters)
        deadline = time.monotonic() + 60
        while not consumer.assignment():  # without a group: every partition, once known
            assert time.monotonic() < deadline, f"no partitions of {topic} assigned"
            for batch in (await consumer.getmany(timeout_ms=100)).values():
                records.extend(batch)
        tps = sorted(consumer.assignment())
        ends = await consumer.end_offsets(tps)
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            assert time.monotonic() < deadline, f"{topic} not read to its end in 60 s"
            batches = await consumer.getmany(timeout_ms=200)
            for batch in batches.values():
                records.extend(batch)
    finally:
        await consumer.stop()
    return records


def scored_at_exit(log_text: str) -> int:
    """The answers the last ``citemon run`` in ``log_text`` counted, from the line it prints as
    it exits: final, so nothing counted after a check can be missed (unlike a scrape)."""
    found = re.findall(r"citemon run: \d+ records, (\d+) answers scored", log_text)
    assert found, f"no exit summary in the log: {log_text[-2000:]}"
    return int(found[-1])


def start_scraped_monitor(
    bootstrap: str, topic: str, metrics_port: int, log_path: Any, *extra: str
) -> subprocess.Popen[bytes]:
    """``citemon run`` for a Prometheus to scrape: a group and dead-letter topic of its own,
    ``/metrics`` on loopback ``metrics_port``, no per-version budget (every answer scored)."""
    flags = [
        "--bootstrap-servers", bootstrap, "--topic", topic, "--group", f"g.{topic}",
        "--dlq-topic", f"{topic}.dlq", "--metrics-host", "127.0.0.1",
        "--metrics-port", str(metrics_port), "--budget-per-minute", "0", *extra,
    ]  # fmt: skip
    return start_process(flags, log_path=log_path)


def start_process(
    flags: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    log_path: Any = None,
    faults: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """``citemon run`` in a subprocess (its own process, so it can be killed for real);
    ``faults`` (``--fail-commit``, ``--disable-codecs lz4``…) run it through
    :mod:`tests.kafka_faults` instead of ``citemon.cli``."""
    full_env = {**os.environ, **(env or {})}
    out = open(log_path, "ab") if log_path is not None else subprocess.DEVNULL  # noqa: SIM115
    entry = ["tests.kafka_faults", *faults] if faults else ["citemon.cli"]
    return subprocess.Popen(
        [PYTHON, "-m", *entry, "--log-level", "INFO", "run", *flags],
        cwd=REPO,
        env=full_env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def ready(port: int) -> bool:
    """Whether the ``citemon run`` on ``port`` answers ``/readyz`` with 200."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=0.5).status_code == 200
    except httpx.HTTPError:
        return False


def scrape(port: int, timeout_s: float = 1.0) -> dict[str, float] | None:
    """Sums of each sample name on ``/metrics`` (None when the process does not answer)."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s).text
    except httpx.HTTPError:
        return None
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        value = line.rsplit(" ", 1)[-1]
        try:
            sums[name] = sums.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return sums


async def committed_total(bootstrap: str, group: str, topic: str, partitions: int) -> int:
    """The offsets ``group`` has committed on ``topic``'s first ``partitions``, summed (a partition
    with none counts 0): how many records the group is past."""
    from aiokafka.structs import TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        offsets = [await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)]
    finally:
        await consumer.stop()
    return sum(o or 0 for o in offsets)
