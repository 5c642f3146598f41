"""Verdicts back on the trace: ``gen_ai.evaluation.result`` events over OTLP.

With ``citemon run --evaluation-events``, for every answer it counts, two OpenTelemetry
log-based events named ``gen_ai.evaluation.result`` (the GenAI semantic conventions' evaluation
event, status Development) go to the OTLP endpoint of the standard ``OTEL_EXPORTER_OTLP_*``
variables, each with the answer span's trace ID and span ID as its trace context, so a tracing
backend shows citemon's verdict next to the trace (``docs/evaluation-events.md``):

====================================  ================================  ==========================
``gen_ai.evaluation.name``            ``gen_ai.evaluation.score.value``  ``…score.label``
====================================  ================================  ==========================
``citemon.citation_accuracy``         correct / cited claims            ``pass``, ``fail``,
                                                                        ``no_citations`` (no value)
``citemon.faithfulness``              faithful / judged claims          ``pass``, ``fail`` (none and
                                                                        no value: nothing judged)
====================================  ================================  ==========================

plus ``gen_ai.evaluation.explanation`` (the failing claims' verdicts, at most
:data:`MAX_EXPLANATION_CHARS`) and ``citemon.verdicts.<verdict>`` (the answer's claim counts).

Events are telemetry, best effort; the exact record stays the results topic. They are emitted
only after the answer is counted (its offset committed), through the SDK's
``BatchLogRecordProcessor``, whose worker thread does the exporting: nothing here waits for the
network. The SDK's queue, when full, silently drops its *oldest* record (a log line and an
internal metric, nothing countable), so this module keeps its own bound in front of it: at most
``max_queue`` events are admitted and not yet exported; the next ones are refused and counted
``dropped``. Every emitted event is counted exactly once in
``citemon_evaluation_events_total{outcome}``: ``sent`` (the endpoint accepted its batch),
``failed`` (the export failed after the exporter's own retries, within
``OTEL_EXPORTER_OTLP_TIMEOUT``) or ``dropped`` (refused at a full queue, or still queued when
:meth:`EvaluationEvents.aclose` gave up).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final, Literal

from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.context import Context
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from citemon.core.errors import ConfigError
from citemon.core.records import CITED_VERDICTS, VERDICTS, AnswerScore, ClaimResult
from citemon.core.tally import Tally

__all__ = [
    "ACCURACY",
    "CLOSE_TIMEOUT_S",
    "EVENT_NAME",
    "EVENT_OUTCOMES",
    "FAITHFULNESS",
    "MAX_EXPLANATION_CHARS",
    "EvaluationEvent",
    "EvaluationEvents",
    "EventOutcome",
    "evaluation_events",
    "otlp_log_exporter",
]

log = logging.getLogger("citemon.events")

EVENT_NAME: Final = "gen_ai.evaluation.result"
ACCURACY: Final = "citemon.citation_accuracy"
FAITHFULNESS: Final = "citemon.faithfulness"

MAX_EXPLANATION_CHARS: Final = 400
"""``gen_ai.evaluation.explanation`` is cut to this many characters (ending in ``…``)."""

EventOutcome = Literal["sent", "dropped", "failed"]
"""What became of one event: ``citemon_evaluation_events_total{outcome}``."""

EVENT_OUTCOMES: Final[tuple[EventOutcome, ...]] = ("sent", "dropped", "failed")

EXTRA_HINT: Final = "pip install 'citemon[events]'"

CLOSE_TIMEOUT_S: Final = 2.0
"""How long :meth:`EvaluationEvents.aclose` waits for the queue to drain at shutdown; it comes
after ``citemon run``'s drain (30 s) and client close (10 s), inside Kubernetes' 45 s."""

_PROTOCOL_ENVS: Final = ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_MAX_CLAIMS_NAMED: Final = 8  # claims listed in an explanation before "and N more"

Attributes = dict[str, str | int | float]


# -- what an answer's events say (pure) --------------------------------------------------------


class EvaluationEvent:
    """One ``gen_ai.evaluation.result`` event: its attributes and the answer span it belongs to."""

    __slots__ = ("attributes", "span_id", "trace_id")

    def __init__(self, attributes: Attributes, trace_id: str | None, span_id: str | None) -> None:
        self.attributes = attributes
        self.trace_id = trace_id
        self.span_id = span_id

    def __repr__(self) -> str:
        return f"EvaluationEvent({self.attributes!r}, trace_id={self.trace_id!r})"


def evaluation_events(score: AnswerScore, span_id: str | None) -> list[EvaluationEvent]:
    """The two events of one scored answer: citation accuracy, then faithfulness."""
    counts = dict.fromkeys(VERDICTS, 0)
    for c in score.claims:
        counts[c.verdict] += 1
    verdicts: Attributes = {f"citemon.verdicts.{v}": n for v, n in counts.items()}
    return [
        EvaluationEvent(_accuracy(score.claims) | verdicts, score.trace_id, span_id),
        EvaluationEvent(_faithfulness(score.claims) | verdicts, score.trace_id, span_id),
    ]


def _accuracy(claims: list[ClaimResult]) -> Attributes:
    cited = [(i, c) for i, c in enumerate(claims, 1) if c.verdict in CITED_VERDICTS]
    out: Attributes = {"gen_ai.evaluation.name": ACCURACY}
    if not cited:
        out["gen_ai.evaluation.score.label"] = "no_citations"
        out["gen_ai.evaluation.explanation"] = "no judged claim carries a citation"
        return out
    failing = [(i, c) for i, c in cited if c.verdict != "correct"]
    accuracy = Tally.of(claims).citation_accuracy
    assert accuracy is not None  # some claim is cited
    out["gen_ai.evaluation.score.value"] = accuracy
    out["gen_ai.evaluation.score.label"] = "fail" if failing else "pass"
    if failing:
        named = "; ".join(
            f"claim {i}: {c.verdict}{f' ({c.pattern})' if c.pattern else ''}"
            f" [{', '.join(c.cited_ids)}]"
            for i, c in failing[:_MAX_CLAIMS_NAMED]
        )
        more = len(failing) - _MAX_CLAIMS_NAMED
        why = f"{len(failing)} of {len(cited)} cited claims failed: {named}"
        why += f"; and {more} more" if more > 0 else ""
        out["gen_ai.evaluation.explanation"] = _cap(why)
    else:
        out["gen_ai.evaluation.explanation"] = f"all {len(cited)} cited claims correct"
    return out


def _faithfulness(claims: list[ClaimResult]) -> Attributes:
    judged = [(i, c) for i, c in enumerate(claims, 1) if c.faithful is not None]
    out: Attributes = {"gen_ai.evaluation.name": FAITHFULNESS}
    if not judged:
        out["gen_ai.evaluation.explanation"] = "no claim was judged"
        return out
    failing = [i for i, c in judged if not c.faithful]
    faithfulness = Tally.of(claims).faithfulness
    assert faithfulness is not None  # some claim's faithfulness is known
    out["gen_ai.evaluation.score.value"] = faithfulness
    out["gen_ai.evaluation.score.label"] = "fail" if failing else "pass"
    if failing:
        named = ", ".join(str(i) for i in failing[:_MAX_CLAIMS_NAMED])
        more = len(failing) - _MAX_CLAIMS_NAMED
        why = (
            f"{len(failing)} of {len(judged)} judged claims not supported by the retrieved "
            f"passages: claim {named}" + (f" and {more} more" if more > 0 else "")
        )
        out["gen_ai.evaluation.explanation"] = _cap(why)
    else:
        out["gen_ai.evaluation.explanation"] = (
            f"all {len(judged)} judged claims supported by the retrieved passages"
        )
    return out


def _cap(text: str) -> str:
    return text if len(text) <= MAX_EXPLANATION_CHARS else text[: MAX_EXPLANATION_CHARS - 1] + "…"


def _span_context(trace_id: str | None, span_id: str | None) -> Context:
    """The answer span as a (remote, sampled) parent context; empty when its IDs are not W3C's
    (the event then goes out without a trace context rather than with another one's)."""
    try:
        tid, sid = int(trace_id or "", 16), int(span_id or "", 16)
    except ValueError:
        return Context()
    if not (0 < tid < 1 << 128 and 0 < sid < 1 << 64):
        return Context()
    ctx = SpanContext(tid, sid, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(ctx))


# -- the exporter ------------------------------------------------------------------------------


def otlp_log_exporter() -> LogRecordExporter:
    """The OTLP log exporter the standard variables ask for (``OTEL_EXPORTER_OTLP_LOGS_PROTOCOL``
    or ``OTEL_EXPORTER_OTLP_PROTOCOL``: ``http/protobuf``, the default, or ``grpc``); endpoint,
    headers, timeout, TLS and compression come from ``OTEL_EXPORTER_OTLP_*`` as the SDK reads
    them. Raises :class:`ConfigError` naming what to install when the exporter is missing."""
    protocol = next((os.environ[e] for e in _PROTOCOL_ENVS if os.environ.get(e)), "http/protobuf")
    protocol = protocol.strip().lower()
    try:
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
                OTLPLogExporter as GrpcExporter,
            )

            return GrpcExporter()
        if protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http._log_exporter import (
                OTLPLogExporter as HttpExporter,
            )

            return HttpExporter()
    except ImportError as exc:
        package = (
            "opentelemetry-exporter-otlp-proto-grpc"
            if protocol == "grpc"
            else "opentelemetry-exporter-otlp-proto-http"
        )
        raise ConfigError(
            f"--evaluation-events needs the OTLP log exporter ({package}: {exc.name} is not "
            f"installed): {EXTRA_HINT}" + (f" {package}" if protocol == "grpc" else "")
        ) from None
    raise ConfigError(
        f"--evaluation-events: unsupported OTLP protocol {protocol!r} "
        f"(from {' / '.join(_PROTOCOL_ENVS)}); use http/protobuf or grpc"
    )


class _Ledger:
    """Events admitted and not yet settled, and the counts: the one lock the exporter's thread
    and the event loop share. An admitted event is settled exactly once: sent, failed, or
    dropped when :meth:`abandon` gives up on it."""

    def __init__(self, capacity: int, count: Callable[[EventOutcome, int], None]) -> None:
        self.capacity = capacity
        self._count = count
        self._lock = threading.Lock()
        self.pending = 0
        self._abandoned = False
        self.totals: dict[EventOutcome, int] = dict.fromkeys(EVENT_OUTCOMES, 0)

    def _add(self, outcome: EventOutcome, n: int) -> None:
        if n:
            self.totals[outcome] += n
            self._count(outcome, n)

    def admit(self) -> bool:
        with self._lock:
            if self._abandoned or self.pending >= self.capacity:
                self._add("dropped", 1)
                return False
            self.pending += 1
            return True

    def settle(self, outcome: EventOutcome, n: int) -> None:
        with self._lock:
            if self._abandoned:
                return  # already counted dropped
            n = min(n, self.pending)
            self.pending -= n
            self._add(outcome, n)

    def abandon(self) -> int:
        """Count what is still pending as dropped and ignore its later outcome."""
        with self._lock:
            left, self.pending, self._abandoned = self.pending, 0, True
            self._add("dropped", left)
            return left


class _CountingExporter(LogRecordExporter):
    """Passes batches to the real exporter (on the batch processor's thread) and settles them."""

    def __init__(self, inner: LogRecordExporter, ledger: _Ledger) -> None:
        self._inner = inner
        self._ledger = ledger

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        result = LogRecordExportResult.FAILURE
        try:
            result = self._inner.export(batch)
        except Exception:  # an exporter bug is a failed export, not a dead worker thread
            log.warning("evaluation events: the OTLP exporter raised", exc_info=True)
        ok = result == LogRecordExportResult.SUCCESS
        self._ledger.settle("sent" if ok else "failed", len(batch))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


class EvaluationEvents:
    """Sends each counted answer's ``gen_ai.evaluation.result`` events; never blocks, never raises.

    ``count(outcome, n)`` receives every outcome (``Metrics.evaluation_events``); it is called
    from the event loop (drops) and from the exporter's thread (sent, failed). ``exporter``
    defaults to :func:`otlp_log_exporter`; ``resource`` to the SDK's (``OTEL_SERVICE_NAME``,
    ``OTEL_RESOURCE_ATTRIBUTES``; service name ``citemon`` unless those say otherwise).
    """

    def __init__(
        self,
        count: Callable[[EventOutcome, int], None],
        *,
        exporter: LogRecordExporter | None = None,
        max_queue: int = 2048,
        max_export_batch: int = 512,
        schedule_delay_ms: float = 1000.0,
        resource: Resource | None = None,
    ) -> None:
        if max_queue < 1:
            raise ValueError("max_queue must be >= 1")
        self._ledger = _Ledger(max_queue, count)
        if resource is None:
            resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
            if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
                resource = resource.merge(Resource({"service.name": "citemon"}))
        self._provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
        # The SDK's own queue is as long as ours: it never fills, so it never drops silently.
        self._provider.add_log_record_processor(
            BatchLogRecordProcessor(
                _CountingExporter(exporter or otlp_log_exporter(), self._ledger),
                schedule_delay_millis=schedule_delay_ms,
                max_export_batch_size=min(max_export_batch, max_queue),
                max_queue_size=max_queue,
            )
        )
        self._logger = self._provider.get_logger("citemon")
        self._closed = False
        self._warned = False

    @property
    def totals(self) -> dict[EventOutcome, int]:
        """Events sent, failed and dropped so far (a copy)."""
        return dict(self._ledger.totals)

    @property
    def pending(self) -> int:
        """Events admitted and not yet sent, failed or dropped."""
        return self._ledger.pending

    def answer_counted(self, score: AnswerScore, span_id: str | None) -> None:
        """Emit ``score``'s two events (the pipeline calls this once the answer is counted)."""
        if self._closed:
            return
        try:
            events = evaluation_events(score, span_id)
        except Exception:  # a bug here must never reach the pipeline's commit
            log.error("evaluation events: cannot describe an answer", exc_info=True)
            return
        for event in events:
            if not self._ledger.admit():
                if not self._warned:
                    self._warned = True
                    log.warning(
                        "evaluation events: queue full (%d), dropping events (counted in "
                        'citemon_evaluation_events_total{outcome="dropped"})',
                        self._ledger.capacity,
                    )
                continue
            try:
                self._logger.emit(
                    timestamp=time.time_ns(),
                    context=_span_context(event.trace_id, event.span_id),
                    severity_number=SeverityNumber.INFO,
                    attributes=event.attributes,
                    event_name=EVENT_NAME,
                )
            except Exception:
                log.error("evaluation events: the SDK refused an event", exc_info=True)
                self._ledger.settle("failed", 1)

    async def aclose(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Export what is queued, within ``timeout_s``; what is left then is counted dropped.

        The SDK's shutdown joins its worker thread (one export may wait for the endpoint up to
        ``OTEL_EXPORTER_OTLP_TIMEOUT``), so it runs on a daemon thread of its own: a stuck
        endpoint never holds the process past ``timeout_s``."""
        if self._closed:
            return
        self._closed = True
        done = asyncio.Event()
        loop = asyncio.get_running_loop()

        def shutdown() -> None:
            try:
                self._provider.shutdown()
            except Exception:
                log.warning("evaluation events: exporter shutdown failed", exc_info=True)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                    loop.call_soon_threadsafe(done.set)

        threading.Thread(target=shutdown, name="citemon-events-close", daemon=True).start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout_s)
        left = self._ledger.abandon()
        totals = self._ledger.totals
        log.info(
            "evaluation events: %d sent, %d failed, %d dropped%s",
            totals["sent"],
            totals["failed"],
            totals["dropped"],
            f" ({left} still queued at shutdown)" if left else "",
        )
