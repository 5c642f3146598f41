"""Live demo on Kafka: a RAG service ships a buggy deploy and citemon sees citation accuracy drop.

Needs a broker (``make demo`` starts one with ``make kafka-up``). Creates its own topics, runs a
small synthetic help-centre RAG service that records every answer with the OpenTelemetry shim
and ships the spans to Kafka with KafkaSpanExporter — first as version v1 (mostly correct
citations), then a "deploy" of v2 whose every claim cites the first retrieved passage — and
runs the monitor (``citemon run``, offline judge, /metrics on --metrics-port) in the same
process. Every --interval seconds it prints a per-version table; it stops by itself after
--duration seconds, and Ctrl-C stops everything it started. --offline scores the bundled sample
without Kafka instead.

--review DIR also samples every scored answer for review (`run --review-rate 1`, to a review
topic of the demo's own), with checker faults planted besides the pipeline's (an answer whose
support sits in an overlapping chunk, a sentence that fuses two claims;
:mod:`citemon._demo.review`),
and at the end writes the review topic to DIR/review-records.jsonl and a review set of 50
answers pulled from it to DIR/review-set.jsonl (seed 0), ready to label. With --offline it is
the review loop's worked example instead (docs/review.md): 150 answers of v1 and 150 of v2 with
those faults, scored offline, deterministic.

--via-collector sends the spans the way a production service does instead: the standard OTLP
HTTP exporter to the project's OpenTelemetry Collector (``make collector``), started here on
``deploy/otel-collector.yaml`` with free loopback ports and the demo's topic (see
:mod:`citemon._commands._collector`), which writes them to Kafka. Everything else is the same.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from prometheus_client import CollectorRegistry
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from citemon._commands._collector import (
    COLLECTOR_ENV,
    CollectorError,
    RunningCollector,
    collector_binary,
    log_tail,
    run_collector,
)
from citemon._commands._demo_review import offline_review, review_dir, save_review_topic
from citemon._commands._files import render_table
from citemon._core.errors import ConfigError
from citemon._core.settings import MAIN, Flag, FlagSettings
from citemon._demo.data import sample_records
from citemon._demo.live_table import LiveTable, open_table
from citemon._demo.store import ids_only, write_demo_store
from citemon._demo.version_table import render_versions, verdict_line
from citemon._engine.scoring import Scorer
from citemon._engine.summary import summarize
from citemon._passages import add_passage_store_arguments
from citemon._passages.open import open_store_from, store_settings
from citemon._passages.settings import PassageStoreSettings
from citemon._service.settings import Settings
from citemon.judges import add_judge_arguments, judge_options, load_judge
from citemon.judges.settings import JudgeSettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

    from citemon._demo.service import FakeRAGService

__all__ = ["DemoSettings", "add_arguments", "main"]


class DemoSettings(FlagSettings):
    """``citemon demo``'s own flags (the judge's and the passage store's are their models').

    The demo's shape (``--offline``, ``--duration``, ``--rate``, ``--review``…) is flag only:
    it is chosen per run. Where it runs has a variable: ``--bootstrap-servers`` is
    ``CITEMON_BOOTSTRAP_SERVERS``, the variable ``citemon run`` reads (the same brokers, the
    demo's own default), and ``--metrics-port`` is ``CITEMON_DEMO_METRICS_PORT`` (``run``'s
    ``CITEMON_METRICS_PORT`` is the monitor's port, which the demo's must not take when both
    run on one machine). ``--collector``'s default, ``$CITEMON_COLLECTOR``, is read where the
    Collector is found (:func:`~citemon._commands._collector.collector_binary`), as the tests
    and ``make`` read it."""

    model_config = SettingsConfigDict(
        env_prefix="CITEMON_DEMO_", extra="ignore", validate_default=True, frozen=True
    )
    TITLE: ClassVar[str] = "demo"
    FLAGS: ClassVar[tuple[Flag, ...]] = (
        Flag(
            "--offline",
            "offline",
            "score the bundled sample, no Kafka (old demo)",
            bool,
            env=False,
            group=MAIN,
        ),
        Flag("--explain", "explain", "(--offline) reasons per claim", bool, env=False, group=MAIN),
        Flag(
            "--bootstrap-servers",
            "bootstrap_servers",
            "Kafka brokers (default 127.0.0.1:9092, what make kafka-up starts)",
            group=MAIN,
        ),
        Flag("--duration", "duration", "seconds (default 45)", float, env=False, group=MAIN),
        Flag(
            "--deploy-at",
            "deploy_at",
            "seconds until v2 ships (default 40%%)",
            float,
            env=False,
            group=MAIN,
        ),
        Flag("--rate", "rate", "answers per second (default 8)", float, env=False, group=MAIN),
        Flag("--interval", "interval", "seconds between tables", float, env=False, group=MAIN),
        Flag("--metrics-port", "metrics_port", "/metrics port (9464)", int, group=MAIN),
        Flag(
            "--keep-topics",
            "keep_topics",
            "do not delete the topics",
            bool,
            env=False,
            group=MAIN,
        ),
        Flag(
            "--via-collector",
            "via_collector",
            "export over OTLP/HTTP through the project's OpenTelemetry Collector "
            "(make collector) instead of straight to Kafka",
            bool,
            env=False,
            group=MAIN,
        ),
        Flag(
            "--collector",
            "collector",
            f"the Collector binary (implies --via-collector; default ${COLLECTOR_ENV}, "
            "else deploy/collector.sh path)",
            metavar="PATH",
            env=False,
            group=MAIN,
        ),
        Flag(
            "--review",
            "review",
            "sample every answer for review and write the review records and a set of 50 to "
            "DIR (with --offline: the review loop's worked example, no Kafka)",
            Path,
            metavar="DIR",
            env=False,
            group=MAIN,
        ),
        Flag(
            "--ids-only",
            "ids_only",
            "trace documents by ID alone, no text (as the GenAI conventions do) and let the "
            "monitor look the text up in a passage store the demo fills (SQLite)",
            bool,
            env=False,
            group=MAIN,
        ),
    )

    offline: bool = False
    explain: bool = False
    bootstrap_servers: str = Field("127.0.0.1:9092", validation_alias="CITEMON_BOOTSTRAP_SERVERS")
    duration: float = 45.0
    deploy_at: float | None = None
    rate: float = 8.0
    interval: float = 3.0
    metrics_port: int = Field(9464, ge=0, le=65535)  # as run's: checked before any topic exists
    keep_topics: bool = False
    via_collector: bool = False
    collector: str | None = None
    review: Path | None = None
    ids_only: bool = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    DemoSettings.add_arguments(parser)
    add_judge_arguments(parser)
    add_passage_store_arguments(parser)


# -- the live demo ---------------------------------------------------------------------------


async def _create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        async with asyncio.timeout(15):
            await admin.start()
            await admin.create_topics(
                [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names]
            )
    except Exception as exc:
        raise ConfigError(
            f"cannot reach Kafka at {bootstrap} ({type(exc).__name__}: {exc}); "
            "start one with `make kafka-up`"
        ) from None
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


async def _delete_topics(bootstrap: str, names: list[str]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    with contextlib.suppress(Exception):
        async with asyncio.timeout(10):
            await admin.start()
            await admin.delete_topics(names)
    with contextlib.suppress(Exception):
        await admin.close()


def _serve_answers(
    service: Any,
    *,
    rate: float,
    duration_s: float,
    deploy_at_s: float,
    stop: threading.Event,
    checker_faults: bool = False,
) -> None:
    """The RAG service's traffic: v1 until ``deploy_at_s``, then v2 with the attribution bug;
    with ``checker_faults``, the review demo's mixes (overlapping chunks, fused claims)."""
    mixes: dict[str, Any] = {}
    if checker_faults:
        from citemon._demo.review import REVIEW_FAULTS

        mixes = {version: {"faults": mix} for version, mix in REVIEW_FAULTS.items()}
    service.deploy("v1", **mixes.get("v1", {}))
    start = time.monotonic()
    deployed = False
    n = 0
    while not stop.is_set():
        elapsed = time.monotonic() - start
        if elapsed >= duration_s:
            return
        if not deployed and elapsed >= deploy_at_s:
            service.deploy("v2", first_passage_bug=True, **mixes.get("v2", {}))
            deployed = True
            print(f">>> t={elapsed:.0f}s: deploy — v2 rolls out (its claims all cite the "
                  "first retrieved passage)\n", flush=True)  # fmt: skip
        service.handle()
        n += 1
        # Pace by schedule, not by sleep-after-work, so the rate holds.
        stop.wait(max(0.0, start + n / rate - time.monotonic()))


def _check_timing(own: DemoSettings, *, deploy_at_s: float, traffic_s: float) -> None:
    """Refuse what would make a demo without its point: no traffic pacing (a zero rate divided
    by, a negative one flooding), a busy table loop, or a deploy after the traffic has ended."""
    if not own.rate > 0:
        raise ConfigError(f"--rate must be above 0 answers/s, not {own.rate:g}")
    if not own.interval > 0:
        raise ConfigError(f"--interval must be above 0 s, not {own.interval:g}")
    if not 0 <= deploy_at_s < traffic_s:
        raise ConfigError(
            f"v2 would never ship: --deploy-at {deploy_at_s:g}s is not within the traffic's "
            f"0–{traffic_s:g}s (traffic stops 5 s before --duration ends); "
            "use a longer --duration or an earlier --deploy-at"
        )


def _otlp_http_exporter_class() -> Any:
    """The standard OTLP/HTTP span exporter, imported only for --via-collector."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise ConfigError(
            f"--via-collector needs the OTLP HTTP exporter ({exc}): "
            "pip install 'citemon[collector]' (in a checkout: make install)"
        ) from None
    return OTLPSpanExporter


async def _start_collector(
    binary: Path, workdir: Path, bootstrap: str, topic: str, stack: contextlib.ExitStack
) -> RunningCollector:
    # Blocking (it waits for the ports): off the loop, so a Ctrl-C meanwhile is still handled.
    return await asyncio.to_thread(
        stack.enter_context, run_collector(binary, workdir, bootstrap, topic, name="collector")
    )


async def _live(own: DemoSettings, judging: JudgeSettings, passages: PassageStoreSettings) -> int:
    from citemon._commands.run import serve
    from citemon._demo.service import FakeRAGService

    via_collector = bool(own.via_collector or own.collector)
    if via_collector:  # refuse before any topic exists
        binary = collector_binary(own.collector)
        exporter_class = _otlp_http_exporter_class()
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    topic = f"citemon._demo.{run_id}.spans"
    topics = [topic, f"{topic}.dlq"]
    review_topic = f"citemon._demo.{run_id}.review"
    if own.review is not None:
        review_dir(own.review)  # refuse before any topic exists
        topics.append(review_topic)
    duration = max(5.0, own.duration)
    deploy_at = own.deploy_at if own.deploy_at is not None else 0.4 * duration
    # The monitor gets most of the run; the last few seconds let it catch up before the end.
    traffic_s = max(2.0, duration - 5.0)
    _check_timing(own, deploy_at_s=deploy_at, traffic_s=traffic_s)
    await _create_topics(own.bootstrap_servers, topics, partitions=3)
    settings = Settings(
        judge=judging,
        bootstrap_servers=own.bootstrap_servers,
        topic=topic,
        group=f"citemon-demo-{run_id}",
        dlq_topic=topics[1],
        metrics_port=own.metrics_port,
        metrics_host="127.0.0.1",
        commit_interval_s=0.5,
        lag_interval_s=1.0,
        review_rate=1.0 if own.review is not None else 0.0,
        review_topic=review_topic,
    )
    stop = asyncio.Event()
    stop_traffic = threading.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        print("\ninterrupted: stopping the service and the monitor", flush=True)
        stop_traffic.set()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    registry = CollectorRegistry()
    monitor_stop = asyncio.Event()
    settings = settings.model_copy(update={"passages": passages})  # its store
    monitor = asyncio.create_task(serve(settings, stop=monitor_stop, registry=registry))
    collector_stack = contextlib.ExitStack()  # the Collector, when there is one
    workdir = Path(tempfile.mkdtemp(prefix="citemon-demo-"))  # its config override and log
    keep_workdir = False
    service: FakeRAGService | None = None
    traffic: asyncio.Task[None] | None = None
    table: LiveTable | None = None
    try:
        path = f"Kafka {own.bootstrap_servers}"
        exporter_factory: Callable[[], SpanExporter] | None = None
        collector: RunningCollector | None = None
        if via_collector:
            collector = await _start_collector(
                binary, workdir, own.bootstrap_servers, topic, collector_stack
            )
            endpoint = collector.http_endpoint
            path = f"OTLP/HTTP {endpoint} → Collector {binary.name} → {path}"

            def exporter_factory() -> SpanExporter:
                exporter: SpanExporter = exporter_class(endpoint=endpoint)
                return exporter

        service = FakeRAGService(
            own.bootstrap_servers,
            topic,
            seed=int(time.time()),
            exporter_factory=exporter_factory,
            ids_only=own.ids_only,
        )
        print(
            f"citemon demo: service 'support-bot' → {path} topic {topic}\n"
            f"monitor: judge {judging.judge}, metrics http://127.0.0.1:{own.metrics_port}/metrics; "
            f"{own.rate:g} answers/s, v2 ships at t={deploy_at:.0f}s, ends at t={duration:.0f}s\n",
            flush=True,
        )
        traffic = asyncio.create_task(
            asyncio.to_thread(
                _serve_answers,
                service,
                rate=own.rate,
                duration_s=min(traffic_s, duration),
                deploy_at_s=deploy_at,
                stop=stop_traffic,
                checker_faults=own.review is not None,
            )
        )
        start = time.monotonic()
        table = open_table()
        while not stop.is_set() and time.monotonic() - start < duration:
            if monitor.done():
                monitor.result()  # raises why the monitor stopped
                break
            if collector is not None and collector.process.poll() is not None:
                raise CollectorError(
                    f"the Collector exited ({collector.process.returncode}) during the demo; "
                    f"its log ({collector.log_path}):\n{log_tail(collector.log_path)}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), own.interval)
            elapsed = time.monotonic() - start
            sent = sum(service.answered.values())
            table.show(f"t={elapsed:4.0f}s  answers sent {sent}\n" + render_versions(registry))
    except CollectorError:
        keep_workdir = True  # the error names the Collector's log there
        raise
    finally:
        if table is not None:
            table.close()  # the last table stays on the screen
        stop_traffic.set()
        if traffic is not None:
            with contextlib.suppress(Exception):
                await traffic
        if service is not None:
            await asyncio.to_thread(service.shutdown)
        # After the service flushed to it, and before the monitor stops: SIGTERM makes the
        # Collector flush its queue to Kafka.
        await asyncio.to_thread(collector_stack.close)
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        monitor_stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(monitor, settings.drain_timeout_s + 10)
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        try:
            if own.review is not None and not stop.is_set():
                await save_review_topic(settings, own.review)
        finally:
            if not own.keep_topics:
                await _delete_topics(own.bootstrap_servers, topics)
    print("final, from the monitor's Prometheus counters:")
    print(render_versions(registry))
    verdict = verdict_line(registry)
    if verdict:
        print("\n" + verdict)
    return 130 if stop.is_set() else 0


async def _offline(
    own: DemoSettings, judging: JudgeSettings, passages: PassageStoreSettings
) -> int:
    records = sample_records()
    store = None
    if own.ids_only:  # the same sample, its text looked up instead of carried
        records = [ids_only(r) for r in records]
        store = open_store_from(passages)
    scorer = Scorer(load_judge(judging.judge, judging), passages=store)
    try:
        scores = await scorer.score_many(records)
    finally:
        if store is not None:
            await store.aclose()
    print(render_table(scores, summarize(scores), "any_of", explain=own.explain))
    return 0


def _demo_store(
    own: DemoSettings, passages: PassageStoreSettings, workdir: Path
) -> PassageStoreSettings:
    """--ids-only: fill the demo's SQLite store and point the store settings at it (unless the
    user named a store of their own)."""
    if own.ids_only and not passages.passage_store:
        url = write_demo_store(workdir / "passages.db")
        return passages.model_copy(update={"passage_store": url})
    return passages


def main(args: argparse.Namespace) -> int:
    own = DemoSettings.from_args(args)
    judging = judge_options(args)
    if own.review is not None and own.offline:
        return offline_review(judging, own.review)
    with tempfile.TemporaryDirectory(prefix="citemon-demo-store-") as workdir:
        passages = _demo_store(own, store_settings(args), Path(workdir))
        if own.offline:
            return asyncio.run(_offline(own, judging, passages))
        return asyncio.run(_live(own, judging, passages))
