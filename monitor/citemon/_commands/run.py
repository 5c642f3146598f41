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
import logging
import signal

from prometheus_client import CollectorRegistry

from citemon._service.kafka import KafkaClients
from citemon._service.monitor import build_monitor
from citemon._service.pipeline import PipelineStats
from citemon._service.settings import Settings

__all__ = ["add_arguments", "main", "serve"]

log = logging.getLogger("citemon.run")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    Settings.add_arguments(parser, parts=True)  # with the agents part's: settings.agents


async def serve(
    settings: Settings,
    *,
    stop: asyncio.Event,
    registry: CollectorRegistry | None = None,
    clients: KafkaClients | None = None,
) -> PipelineStats:
    """Build the monitor ``settings`` describe and run it until ``stop`` is set; the demo
    calls this too."""
    monitor = build_monitor(settings, clients=clients, registry=registry)
    return await monitor.serve(stop)


async def _main(args: argparse.Namespace, clients: KafkaClients | None) -> int:
    settings = Settings.from_args(args)
    # httpx logs every judge request at INFO; that is the metrics' job, not the log's.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_signal, stop, sig)
    try:
        stats = await serve(settings, stop=stop, clients=clients)
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


def main(args: argparse.Namespace, *, clients: KafkaClients | None = None) -> int:
    """``citemon run``; ``clients`` make its Kafka clients (default: aiokafka's)."""
    return asyncio.run(_main(args, clients))
