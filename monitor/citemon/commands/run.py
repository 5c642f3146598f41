"""Run the online monitor: score answer spans from Kafka and serve Prometheus metrics.

Consumes OTLP span batches (``otlp_proto`` or ``otlp_json``) from --topic as consumer group
--group, samples answers by trace ID and a per-version budget, scores them with the judge and
serves /metrics, /healthz and /readyz on --metrics-port. Every flag has a CITEMON_* environment
variable (the flag wins); the Kafka password comes from CITEMON_KAFKA_PASSWORD or
--kafka-password-file and the judge's API key from CITEMON_JUDGE_API_KEY, never from a flag.
SIGTERM or Ctrl-C stops intake, drains answers in flight (--drain-timeout), commits and exits 0.
If a background task dies (commit loop, lag loop, metrics server), /healthz turns 503, the same
drain runs and the process exits 1 with the cause logged. CPU-bound scoring runs in
--cpu-workers threads, off the event loop; --max-judge-calls-per-answer bounds one answer's
judge calls (the misattribution search is cut, least likely passages first, and counted).

Self-checks: --calibration FILE (from `citemon calibrate --output`) adds the gauge
citemon_citation_accuracy_corrected, the windowed accuracy corrected for the judge's measured
error; --probe-rate R (the shuffle probe; --canary-rate is its deprecated alias) re-checks that
share of scored answers with their citations shuffled and exports
citemon_judge_canary_sensitivity (the metric keeps its old name: dashboards read it) over
--probe-window (R x cited claims more judge calls, about +2% at R = 0.02; the probe is never
counted in the quality metrics).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from citemon.commands._options import add_scoring_arguments, scoring_options
from citemon.core.calibration import Calibration
from citemon.core.errors import ConfigError
from citemon.engine.scoring import Scorer, ScoringOptions
from citemon.judges import add_judge_arguments, judge_options, load_judge
from citemon.metrics import Metrics, MetricsServer
from citemon.passages import add_passage_store_arguments, open_store
from citemon.service.client_noise import quiet_repeats
from citemon.service.gate import GateObserver, JudgeGate
from citemon.service.pipeline import Pipeline, PipelineStats
from citemon.service.settings import Settings, add_settings_arguments, settings_from_args
from citemon.service.startup_noise import quiet_startup

if TYPE_CHECKING:
    from opentelemetry.sdk._logs.export import LogRecordExporter

    from citemon.service.evaluation_events import EvaluationEvents

__all__ = ["add_arguments", "main", "serve"]

log = logging.getLogger("citemon.run")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_settings_arguments(parser)
    add_scoring_arguments(parser)
    add_judge_arguments(parser)
    add_passage_store_arguments(parser, hold=True)


async def serve(
    settings: Settings,
    args: argparse.Namespace,
    *,
    stop: asyncio.Event,
    registry: CollectorRegistry | None = None,
    on_ready: Any = None,
    scoring: ScoringOptions | None = None,
) -> PipelineStats:
    """Run the pipeline and its metrics server until ``stop`` is set; the demo calls this too.

    ``on_ready(pipeline, server)`` is called once both are up (tests and the demo read ports).
    """
    registry = registry or CollectorRegistry()
    calibration = _calibration(settings, args.judge)
    metrics = Metrics(
        registry,
        window_s=settings.window,
        max_versions=settings.max_versions,
        calibration=calibration,
        probe_window_s=settings.probe_window,
    )
    # --evaluation-events: a missing exporter stops us here (exit 2), before anything started.
    event_exporter = _event_exporter(settings)
    gate = JudgeGate(
        backoff_s=settings.answer_retry_backoff_s,
        backoff_max_s=settings.answer_retry_backoff_max_s,
    )
    # A calibration that chose a threshold for this judge measured its error *at* it: apply it.
    calibrated = calibration.threshold_for(args.judge) if calibration else None
    options = judge_options(args, calibrated_threshold=calibrated)
    judge = load_judge(args.judge, options, observer=GateObserver(metrics.judge, gate))
    if args.judge in ("http", "classifier"):
        metrics.judge.set_limit(options.concurrency)
    # CPU-bound scoring (pysbd, the offline judges) runs here, off the event loop, so that
    # heartbeats, /healthz and /metrics answer while a 1 MB answer is split and judged.
    executor = ThreadPoolExecutor(settings.cpu_workers, thread_name_prefix="citemon-cpu")
    # --passage-store: answers wait out a store outage (up to --passage-store-hold) in the
    # scoring slots, so intake stops as for a judge outage; /readyz is 503 meanwhile.
    store = open_store(args, observer=metrics.passages, hold=True)
    scorer = Scorer(judge, scoring or ScoringOptions(), executor=executor, passages=store)
    events = (
        None
        if event_exporter is None
        else _evaluation_events(event_exporter, metrics, settings.evaluation_events_max_queue)
    )
    pipeline = Pipeline(
        settings,
        scorer,
        metrics,
        gate=gate,
        on_counted=events.answer_counted if events is not None else None,
    )
    log.info("settings: %s", settings.describe())
    server = MetricsServer(
        registry,
        host=settings.metrics_host,
        port=settings.metrics_port,
        ready=lambda: pipeline.ready and (store is None or store.up),
        live=lambda: pipeline.live,
    )
    try:
        async with contextlib.AsyncExitStack() as stack:
            try:
                await stack.enter_async_context(server)
            except OSError as exc:  # port taken, address not local: say so, not a traceback
                raise ConfigError(
                    f"cannot serve metrics on {settings.metrics_host}:{settings.metrics_port}: "
                    f"{exc.strerror or exc} (--metrics-port / --metrics-host)"
                ) from None
            # What is alive now (modules, the judge, the clients) lives as long as the process:
            # keep it out of the collector's full passes, which hold the GIL, and so the event
            # loop, for as long as they scan (0.4 s stalls while a 2 MB answer was scored off
            # the loop without this; bench/loop_stall.py).
            gc.collect()
            gc.freeze()
            pipeline.supervise(server.task)
            stack.callback(pipeline.stop_supervising)  # before the server closes
            # aiokafka's "coordinator not available (yet)" while the group forms: debug level.
            stack.enter_context(quiet_startup(lambda: pipeline.ready))
            # aiokafka's same error again and again: once, then counted (service.client_noise).
            stack.enter_context(quiet_repeats(metrics.client_error_repeated))
            if on_ready is not None:
                on_ready(pipeline, server)
            return await pipeline.run(stop)
    finally:
        if events is not None:
            await events.aclose()
        executor.shutdown(wait=False, cancel_futures=True)
        aclose = getattr(judge, "aclose", None)
        if aclose is not None:
            await aclose()
        if store is not None:
            await store.aclose()


def _event_exporter(settings: Settings) -> LogRecordExporter | None:
    """``--evaluation-events``' OTLP log exporter (from the ``OTEL_EXPORTER_OTLP_*`` variables);
    a ConfigError naming the ``citemon[events]`` extra when it is not installed."""
    if not settings.evaluation_events:
        return None
    from citemon.service.evaluation_events import otlp_log_exporter  # only when asked

    return otlp_log_exporter()


def _evaluation_events(
    exporter: LogRecordExporter, metrics: Metrics, max_queue: int
) -> EvaluationEvents:
    from citemon.service.evaluation_events import EvaluationEvents as Events

    return Events(metrics.evaluation_events, exporter=exporter, max_queue=max_queue)


def _calibration(settings: Settings, judge: str) -> Calibration | None:
    """The calibration file, read before anything starts (an unreadable one is a ConfigError,
    exit 2); a file measured on another judge is used but said loudly."""
    if settings.calibration is None:
        return None
    calibration = Calibration.load(settings.calibration)
    if calibration.judge != judge:
        log.warning(
            "calibration file %s measured judge %r, but this monitor runs %r: "
            "the corrected accuracy assumes the calibrated judge's error",
            settings.calibration,
            calibration.judge,
            judge,
        )
    return calibration


async def _main(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    # httpx logs every judge request at INFO; that is the metrics' job, not the log's.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_signal, stop, sig)
    try:
        stats = await serve(settings, args, stop=stop, scoring=scoring_options(args))
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
    print(
        f"citemon run: {stats.records} records, {stats.answers_committed} answers scored, "
        f"{stats.sampled_out} sampled out, {stats.dead_letters} dead-lettered, "
        f"{stats.duplicates} duplicates dropped, {stats.cancelled_at_drain} cancelled at drain",
        flush=True,
    )
    return 0


def _on_signal(stop: asyncio.Event, sig: signal.Signals) -> None:
    if stop.is_set():
        return
    log.warning("%s: stopping intake and draining", sig.name)
    stop.set()


def main(args: argparse.Namespace) -> int:
    return asyncio.run(_main(args))
