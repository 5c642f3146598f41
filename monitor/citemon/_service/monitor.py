"""Building the monitor from its settings: :func:`build_monitor`, the one place that wires it.

Everything ``citemon run`` (and ``citemon demo``) runs is made here from one
:class:`~citemon._service.settings.Settings`: the metrics and their server, the judge gate (once),
the judge, whose transport tells the judge metrics and that gate of every request, the scorer, the
sampler, the trace assembler, the evaluation events and the pipeline, which requires each of
them. The Kafka clients and the clock are handed in (:class:`~citemon._service.kafka.KafkaClients`),
as arq takes its Redis pool: a test passes clients that fail on cue, or a clock it moves, and
the runtime code carries no test hooks.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from citemon._core.calibration import Calibration
from citemon._core.errors import ConfigError
from citemon._engine.scoring import Scorer
from citemon._metrics import Metrics, MetricsServer
from citemon._otlp.assembly import TraceAssembler
from citemon._passages.open import open_store_from
from citemon._service.answers import JudgeGate, Sampler
from citemon._service.kafka import KafkaClients
from citemon._service.lifecycle import quiet_repeats, quiet_startup
from citemon._service.pipeline import Pipeline, PipelineStats
from citemon._service.settings import Settings
from citemon.judges import Judge, load_judge

if TYPE_CHECKING:
    from opentelemetry.sdk._logs.export import LogRecordExporter

    from citemon._passages.managed import ManagedStore
    from citemon._service.evaluation_events import EvaluationEvents

__all__ = ["Monitor", "build_monitor"]

log = logging.getLogger(__name__)


class Monitor:
    """A built monitor: its pipeline, its metrics server and what they share.
    ``await monitor.serve(stop)`` runs it until ``stop`` is set, then closes what it made."""

    def __init__(
        self,
        settings: Settings,
        *,
        pipeline: Pipeline,
        server: MetricsServer,
        registry: CollectorRegistry,
        judge: Judge,
        executor: ThreadPoolExecutor,
        events: EvaluationEvents | None,
        store: ManagedStore | None = None,
    ) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self.server = server
        self.registry = registry
        self.judge = judge
        self._executor = executor
        self._events = events
        self._store = store
        # Set once serve() has the metrics server listening, or once it ended before that
        # (then with what ended it): what wait_serving() waits for.
        self._serving = asyncio.Event()
        self._serve_error: BaseException | None = None

    async def wait_serving(self) -> None:
        """Return once :meth:`serve` has the metrics server listening (``server.port`` is then
        the bound port, also with ``--metrics-port 0``) and the pipeline starting; raise what
        ended ``serve`` if it ended before that (a port taken). What ends it later (a missing
        topic, a fatal error) is ``serve``'s to raise. Being served is not being ready:
        ``/readyz`` (:attr:`Pipeline.ready`) says when partitions are assigned."""
        await self._serving.wait()
        if self._serve_error is not None:
            raise self._serve_error

    async def serve(self, stop: asyncio.Event) -> PipelineStats:
        """Run the pipeline and the metrics server until ``stop`` is set (or a fatal error);
        :meth:`wait_serving` returns once both are up."""
        s, pipeline, server = self.settings, self.pipeline, self.server
        log.info("settings: %s", s.describe())
        try:
            async with contextlib.AsyncExitStack() as stack:
                try:
                    await stack.enter_async_context(server)
                except OSError as exc:  # port taken, address not local: say so, no traceback
                    raise ConfigError(
                        f"cannot serve metrics on {s.metrics_host}:{s.metrics_port}: "
                        f"{exc.strerror or exc} (--metrics-port / --metrics-host)"
                    ) from None
                # What is alive now (modules, the judge, the clients) lives as long as the
                # process: keep it out of the collector's full passes, which hold the GIL, and so
                # the event loop, for as long as they scan (0.4 s stalls while a 2 MB answer was
                # scored off the loop without this; bench/loop_stall.py).
                gc.collect()
                gc.freeze()
                pipeline.supervise(server.task)
                stack.callback(pipeline.stop_supervising)  # before the server closes
                # aiokafka's "coordinator not available (yet)" while the group forms: debug.
                stack.enter_context(quiet_startup(lambda: pipeline.ready))
                # aiokafka's same error again and again: once, then counted (client_noise).
                stack.enter_context(quiet_repeats(pipeline.metrics.client_error_repeated))
                self._serving.set()
                return await pipeline.run(stop)
        except BaseException as exc:
            if not self._serving.is_set():
                self._serve_error = exc
            raise
        finally:
            self._serving.set()
            await self.aclose()

    async def aclose(self) -> None:
        """Close the evaluation events, the scoring threads and the judge."""
        if self._events is not None:
            await self._events.aclose()
        self._executor.shutdown(wait=False, cancel_futures=True)
        aclose = getattr(self.judge, "aclose", None)
        if aclose is not None:
            await aclose()
        if self._store is not None:
            await self._store.aclose()


def build_monitor(
    settings: Settings,
    *,
    clients: KafkaClients | None = None,
    registry: CollectorRegistry | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Monitor:
    """The monitor ``settings`` describe, with ``clients`` making its Kafka clients (aiokafka's
    by default), its metrics in ``registry`` and ``clock`` read for the trace window, the judge
    gate's back-off and the revoke deadline (``time.monotonic`` by default).

    Raises :class:`ConfigError` before anything starts for what cannot work: an unreadable
    calibration file, ``--evaluation-events`` without its exporter, a judge that cannot load.
    """
    registry = registry or CollectorRegistry()
    calibration = _calibration(settings)
    metrics = Metrics(
        registry,
        window_s=settings.window,
        max_versions=settings.max_versions,
        calibration=calibration,
        probe_window_s=settings.probe_window,
    )
    # --evaluation-events: a missing exporter stops us here (exit 2), before anything started.
    exporter = _event_exporter(settings)
    gate = JudgeGate(
        backoff_s=settings.answer_retry_backoff_s,
        backoff_max_s=settings.answer_retry_backoff_max_s,
        clock=clock,
    )
    spec = settings.judge.judge
    judge_settings = settings.judge.calibrated(
        calibration.threshold_for(spec) if calibration else None
    )
    judge = load_judge(spec, judge_settings, observers=(metrics.judge, gate))
    if spec in ("http", "classifier"):
        metrics.judge.set_limit(judge_settings.max_inflight)
    # CPU-bound scoring (pysbd, the offline judges) runs here, off the event loop, so that
    # heartbeats, /healthz and /metrics answer while a 1 MB answer is split and judged.
    executor = ThreadPoolExecutor(settings.cpu_workers, thread_name_prefix="citemon-cpu")
    # --passage-store: answers wait out a store outage (up to --passage-store-hold) in the
    # scoring slots, so intake stops as for a judge outage; /readyz is 503 meanwhile.
    store = open_store_from(settings.passages, observer=metrics.passages, hold=True)
    scorer = Scorer(judge, settings.scoring, executor=executor, passages=store)
    events = None
    if exporter is not None:
        from citemon._service.evaluation_events import EvaluationEvents as Events

        events = Events(
            metrics.evaluation_events,
            exporter=exporter,
            max_queue=settings.evaluation_events_max_queue,
        )
    pipeline = Pipeline(
        settings,
        scorer,
        metrics,
        clients=clients or KafkaClients(),
        sampler=Sampler(
            rate=settings.sample_rate,
            budget_per_minute=settings.budget_per_minute,
            max_keys=settings.max_budget_keys,
        ),
        assembler=TraceAssembler(
            window_s=settings.trace_window_s, max_bytes=settings.held_max_bytes, clock=clock
        ),
        gate=gate,
        clock=clock,
        sinks=() if events is None else (events,),
    )
    server = MetricsServer(
        registry,
        host=settings.metrics_host,
        port=settings.metrics_port,
        ready=lambda: pipeline.ready and (store is None or store.up),
        live=lambda: pipeline.live,
    )
    return Monitor(
        settings,
        pipeline=pipeline,
        server=server,
        registry=registry,
        judge=judge,
        executor=executor,
        events=events,
        store=store,
    )


def _event_exporter(settings: Settings) -> LogRecordExporter | None:
    """``--evaluation-events``' OTLP log exporter (from the ``OTEL_EXPORTER_OTLP_*`` variables);
    a ConfigError naming the ``citemon[events]`` extra when it is not installed."""
    if not settings.evaluation_events:
        return None
    from citemon._service.evaluation_events import otlp_log_exporter  # only when asked

    return otlp_log_exporter()


def _calibration(settings: Settings) -> Calibration | None:
    """The calibration file, read before anything starts (an unreadable one is a ConfigError,
    exit 2); a file measured on another judge is used but said loudly."""
    if settings.calibration is None:
        return None
    calibration = Calibration.load(settings.calibration)
    judge = settings.judge.judge
    if calibration.judge != judge:
        log.warning(
            "calibration file %s measured judge %r, but this monitor runs %r: "
            "the corrected accuracy assumes the calibrated judge's error",
            settings.calibration,
            calibration.judge,
            judge,
        )
    return calibration
