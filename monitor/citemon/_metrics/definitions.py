"""The Prometheus metrics citemon exports: their names, types and labels, and what feeds them.

Label capping is :mod:`citemon._metrics.labels`, the windowed gauges
:mod:`citemon._metrics.windows`, the HTTP endpoint :mod:`citemon._metrics.server`.

Every name, type and label here is a contract (docs/design.md, "Metrics"): the alert rules and the
Grafana dashboard in ``grafana/`` read them, and ``tests/unit/test_grafana.py`` checks that every
name they use is one this module really exports.

Two kinds of numbers:

* **Counters** (answers, claims by verdict, faithful claims, cited IDs, …). Dashboards and alerts
  compute ratios from these because counters *add up across replicas*; a ratio does not.
* **Windowed gauges** (``citemon_citation_accuracy`` and friends): the same ratios over the last
  ``window_s`` seconds as seen by *this* replica, computed at scrape time from a ring of
  per-bucket counts. A convenience for ``curl /metrics`` and single-replica setups. With a
  judge calibration, ``citemon_citation_accuracy_corrected`` is computed in the same pass from
  the very counts behind ``citemon_citation_accuracy``; the shuffle probe's sensitivity has a
  window of its own (``probe_window_s``). Every ratio is asked of a
  :class:`~citemon._core.tally.Tally`. The probe's metrics keep the names they had when it was
  called the "canary" (:data:`LEGACY_NAMES`): the dashboards and alert rules read them.

Cardinality is bounded: at most ``max_services`` services, ``max_environments`` environments and
``max_versions`` versions per service get their own label value; the rest are folded into
``other`` and counted in ``citemon_label_overflow_total{label}``. A version that has been idle
for ``version_idle_s`` gives its slot (and its series) to a new one, so a monitor that runs for
months still shows this week's deploy instead of folding every deploy after the 20th into
``other``.

Everything is built on a ``CollectorRegistry`` passed in; nothing touches the global registry.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from importlib import metadata
from typing import TYPE_CHECKING, Final, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from citemon._core.errors import INVALID_REPLY_CAUSES
from citemon._core.labels import UNKNOWN
from citemon._core.probe import PROBE_OUTCOMES, ProbeCounts, ProbeOutcome
from citemon._core.records import CITED_VERDICTS, PATTERNS, UNJUDGED_CAUSES, VERDICTS, AnswerScore
from citemon._core.tally import Tally
from citemon._metrics.labels import QUALITY_LABELS, LabelCap
from citemon._metrics.passages import PassageMetrics
from citemon._metrics.windows import OptionalGauge, Window, WindowCollector

if TYPE_CHECKING:
    from citemon._core.calibration import Calibration

__all__ = [
    "CITED_VERDICTS",
    "EVALUATION_EVENT_OUTCOMES",
    "JUDGE_OUTCOMES",
    "LEGACY_NAMES",
    "RECORD_CUTS",
    "SPAN_OUTCOMES",
    "JudgeMetrics",
    "Metrics",
    "SpanOutcome",
]


LEGACY_NAMES: Final = {
    "probe_sensitivity": "citemon_judge_canary_sensitivity",
    "probe_answers": "citemon_judge_canary_answers",
}
"""Metric names kept from before a rename, because dashboards and alert rules read them: the
shuffle probe was once called the "canary", and its metrics still carry that name on the wire
(nothing else in citemon calls it so; the *deploy* canary is :mod:`citemon._rollout`)."""

JUDGE_OUTCOMES: Final = ("ok", "error", "timeout", "rate_limited", "invalid")
"""Values of ``citemon_judge_requests_total{outcome}`` (``JudgeError.outcome`` plus ``ok``)."""

SpanOutcome = Literal["answer", "sampled_out", "skipped", "invalid", "part", "unkeyed"]
"""What became of a consumed span, each counted once: a self-contained answer scored, sampled
out, nothing read from it (or an answer counted already), undecodable, or ``part`` of a
multi-span trace (read by a dialect and handed to the assembler: ``citemon_traces_total`` says
what became of its trace); and, counted besides one of those, ``unkeyed``: its Kafka record's
key is not its trace ID."""

SPAN_OUTCOMES: Final[tuple[SpanOutcome, ...]] = (
    "answer",
    "sampled_out",
    "skipped",
    "invalid",
    "part",
    "unkeyed",
)

RECORD_CUTS: Final = (
    ("results", "excerpts"),
    ("results", "claims"),
    ("results", "identity_only"),
    ("review", "dropped"),
    ("dead_letter", "value"),
)
"""Values of ``citemon_records_cut_total{record, reason}``: a produced record cut to fit its
topic's limit (:mod:`citemon._service.outputs`)."""

EVALUATION_EVENT_OUTCOMES: Final = ("sent", "dropped", "failed")
"""Values of ``citemon_evaluation_events_total{outcome}`` (``--evaluation-events``): accepted by
the OTLP endpoint, refused at the full queue (or left queued at shutdown), export failed."""


# Judge latency buckets, in seconds: LLM judges answer in 0.1-10 s; the tail matters for caps.
_JUDGE_BUCKETS_S: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

# An exemplar's label set may hold at most 128 UTF-8 characters (OpenMetrics); a W3C trace ID
# is 32 hex digits, so anything much longer is not a trace ID and is dropped, not sent.
_MAX_TRACE_ID_CHARS: Final = 64

_PROBE_KEY: Final = ("probe",)  # the probe window's one key: the probe measures the judge


def _build_version() -> str:
    try:
        return metadata.version("citemon")
    except metadata.PackageNotFoundError:
        return UNKNOWN


# ---------------------------------------------------------------------------------------------
# The metrics


class _TraceCollector:
    """``citemon_traces_total{outcome}``, read from the assembler's own counts at scrape time
    (the assembler counts and names its outcomes; nothing is copied, so nothing can drift)."""

    def __init__(self) -> None:
        self.source: Callable[[], dict[str, int]] | None = None

    def describe(self) -> Iterable[Metric]:
        yield CounterMetricFamily(
            "citemon_traces", "Multi-span traces by assembler outcome.", labels=["outcome"]
        )

    def collect(self) -> Iterable[Metric]:
        counts = self.source() if self.source is not None else {}
        family = CounterMetricFamily(
            "citemon_traces", "Multi-span traces by assembler outcome.", labels=["outcome"]
        )
        for outcome, n in counts.items():
            family.add_metric([outcome], n)
        yield family


class _HeldCollector:
    """``citemon_held_traces``, ``citemon_held_bytes`` and ``citemon_held_oldest_age_seconds``,
    read from the trace assembler at scrape time."""

    def __init__(self) -> None:
        self.source: Callable[[], tuple[int, int, float]] | None = None

    def describe(self) -> Iterable[Metric]:
        return self._families(0, 0, 0.0)

    def collect(self) -> Iterable[Metric]:
        return self._families(*(self.source() if self.source is not None else (0, 0, 0.0)))

    @staticmethod
    def _families(traces: int, nbytes: int, age_s: float) -> list[Metric]:
        return [
            GaugeMetricFamily(
                "citemon_held_traces",
                "Traces held with parts, waiting for the rest of the trace or its window.",
                value=traces,
            ),
            GaugeMetricFamily(
                "citemon_held_bytes",
                "Bytes of trace parts held in memory for assembly (--held-max-bytes caps it).",
                value=nbytes,
            ),
            GaugeMetricFamily(
                "citemon_held_oldest_age_seconds",
                "How long the oldest trace held with parts has waited (0: none held).",
                value=age_s,
            ),
        ]


class JudgeMetrics:
    """The :class:`citemon._core.judge.JudgeObserver` that feeds the judge metrics.

    Pass ``metrics.judge`` to a judge as its observer. ``set_limit`` publishes the in-flight cap
    so a dashboard can draw ``citemon_judge_inflight`` against it.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._requests = Counter(
            "citemon_judge_requests",
            "Judge requests by outcome (ok, error, timeout, rate_limited, invalid).",
            ["outcome"],
            registry=registry,
        )
        self._seconds = Histogram(
            "citemon_judge_request_seconds",
            "Judge request latency, every outcome included.",
            buckets=_JUDGE_BUCKETS_S,
            registry=registry,
        )
        self._inflight = Gauge(
            "citemon_judge_inflight",
            "Judge requests in flight (never above citemon_judge_inflight_limit).",
            registry=registry,
        )
        self._limit = OptionalGauge(
            "citemon_judge_inflight_limit",
            "The hard cap on judge requests in flight (--judge-concurrency).",
            registry,
        )
        self._cache = Counter(
            "citemon_judge_cache",
            "Judge verdict cache lookups by result (hit, miss).",
            ["result"],
            registry=registry,
        )
        self._invalid = Counter(
            "citemon_judge_invalid_replies",
            "Invalid judge replies by cause (not_completion, too_large, truncated, not_json, "
            "schema, missing_claims, not_yes_no).",
            ["cause"],
            registry=registry,
        )
        for cause in INVALID_REPLY_CAUSES:
            self._invalid.labels(cause)
        for outcome in JUDGE_OUTCOMES:
            self._requests.labels(outcome)
        for result in ("hit", "miss"):
            self._cache.labels(result)

    def request_done(self, outcome: str, seconds: float) -> None:
        """One request finished (after it left the in-flight count)."""
        self._requests.labels(outcome).inc()
        self._seconds.observe(max(0.0, seconds))

    def inflight(self, delta: int) -> None:
        self._inflight.inc(delta)

    def cache(self, hit: bool) -> None:
        self._cache.labels("hit" if hit else "miss").inc()

    def invalid_reply(self, cause: str) -> None:
        """One reply was invalid (its request also counts as outcome ``invalid``)."""
        self._invalid.labels(cause if cause in INVALID_REPLY_CAUSES else "schema").inc()

    def set_limit(self, max_inflight: int) -> None:
        self._limit.set(max_inflight)


class Metrics:
    """citemon's metrics on ``registry``; the one object the pipeline records into.

    ``window_s`` is ``CITEMON_WINDOW`` in seconds (default 15 minutes), kept at the resolution
    of ``window_s / window_buckets``. ``clock`` (monotonic seconds) drives the window and the
    version-slot idle time; tests pass a fake one. ``calibration`` (``--calibration``) turns on
    the windowed corrected accuracy; ``probe_window_s`` (default ``window_s``) is the span of
    the shuffle probe's sums, longer because the probe sees only a small share of answers.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        max_versions: int = 20,
        max_services: int = 50,
        max_environments: int = 10,
        version_idle_s: float = 3600.0,
        window_s: float = 900.0,
        window_buckets: int = 15,
        clock: Callable[[], float] = time.monotonic,
        build_version: str | None = None,
        calibration: Calibration | None = None,
        probe_window_s: float | None = None,
    ) -> None:
        if min(max_versions, max_services, max_environments) < 1:
            raise ValueError("label caps must be >= 1")
        self._clock = clock
        self._lock = threading.Lock()
        self._cap = LabelCap(
            max_services=max_services,
            max_versions=max_versions,
            max_environments=max_environments,
            version_idle_s=version_idle_s,
        )
        self._known: set[tuple[str, ...]] = set()  # label sets with series
        self._window: Window[Tally] = Window(window_s=window_s, buckets=window_buckets, clock=clock)
        self._window_collector = WindowCollector(self._window, calibration)
        registry.register(self._window_collector)
        self._probe_window: Window[ProbeCounts] = Window(
            window_s=probe_window_s or window_s, buckets=window_buckets, clock=clock
        )
        labels = list(QUALITY_LABELS)
        self._answers = Counter("citemon_answers", "Answers scored.", labels, registry=registry)
        self._claims = Counter(
            "citemon_claims", "Claims by verdict.", [*labels, "verdict"], registry=registry
        )
        self._faithful = Counter(
            "citemon_faithful_claims",
            "Judged claims entailed by the concatenated context.",
            labels,
            registry=registry,
        )
        self._cited_ids = Counter(
            "citemon_cited_ids",
            "Cited IDs summed over cited judged claims (IDs per claim = this / cited claims).",
            labels,
            registry=registry,
        )
        self._irrelevant = Counter(
            "citemon_irrelevant_citations",
            "Over-broad citations on correct claims (ALCE rule).",
            labels,
            registry=registry,
        )
        self._overlap = Counter(
            "citemon_overlap_misattributions",
            "Misattributed claims whose supporting passage overlaps a cited one (chunking).",
            labels,
            registry=registry,
        )
        self._quote_mismatches = Counter(
            "citemon_quote_mismatches",
            "Claims whose provider quoted the passage it cites (Anthropic's cited_text) with a "
            "quote that is not in that passage (checked without a judge).",
            labels,
            registry=registry,
        )
        self._patterns = Counter(
            "citemon_misattributions",
            "Misattributed claims by pattern (off_by_one, first_retrieved, previous_citation, "
            "same_document, other): how the citation went wrong.",
            [*labels, "pattern"],
            registry=registry,
        )
        self._probe_sensitivity = OptionalGauge(
            LEGACY_NAMES["probe_sensitivity"],
            "How far accuracy fell on shuffled citations relative to unshuffled, over the "
            "shuffle probe's window (0 = the judge ignores which passage is cited).",
            registry,
            compute=self._probe_value,
        )
        self._probe_answers = Counter(
            LEGACY_NAMES["probe_answers"],
            "Answers picked for the shuffle probe, by outcome (scored, skipped, failed, dropped).",
            ["outcome"],
            registry=registry,
        )
        self._spans = Counter(
            "citemon_spans",
            "Consumed spans by outcome (answer, sampled_out, skipped, invalid; and unkeyed: "
            "its record's key is not its trace ID, counted besides its outcome).",
            ["outcome"],
            registry=registry,
        )
        self._records_cut = Counter(
            "citemon_records_cut",
            "Records produced cut to fit their topic's max.message.bytes, by record (results, "
            "review, dead_letter) and what was cut.",
            ["record", "reason"],
            registry=registry,
        )
        self._client_errors = Counter(
            "citemon_kafka_client_errors",
            "Kafka client (aiokafka) errors and warnings repeating one already logged: "
            "counted here instead of logged again.",
            ["logger"],
            registry=registry,
        )
        self._dead_letters = Counter(
            "citemon_dead_letters",
            "Messages sent to the dead-letter topic, by reason.",
            ["reason"],
            registry=registry,
        )
        self._lag = Gauge(
            "citemon_consumer_lag",
            "Records between the committed position and the log end.",
            ["topic", "partition"],
            registry=registry,
        )
        self._overflow = Counter(
            "citemon_label_overflow",
            "Answers whose service, version or environment was folded into 'other'.",
            ["label"],
            registry=registry,
        )
        self._unjudged = Counter(
            "citemon_unjudged_claims",
            "Claims without a verdict, by cause (judge_failure, truncated, search_cut).",
            ["cause"],
            registry=registry,
        )
        self._calls_cut = Counter(
            "citemon_judge_calls_cut",
            "Judge calls not made because an answer reached max_judge_calls_per_answer "
            "(the misattribution search's least likely passages).",
            registry=registry,
        )
        self._evaluation_events = Counter(
            "citemon_evaluation_events",
            "gen_ai.evaluation.result events (--evaluation-events), by outcome "
            "(sent, dropped, failed).",
            ["outcome"],
            registry=registry,
        )
        self._traces = _TraceCollector()
        registry.register(self._traces)
        self._held = _HeldCollector()
        registry.register(self._held)
        Gauge(
            "citemon_build_info", "citemon's own version.", ["version"], registry=registry
        ).labels(build_version or _build_version()).set(1)
        for outcome in SPAN_OUTCOMES:
            self._spans.labels(outcome)
        for record, reason in RECORD_CUTS:
            self._records_cut.labels(record, reason)
        for name in QUALITY_LABELS:
            self._overflow.labels(name)
        for probe_outcome in PROBE_OUTCOMES:
            self._probe_answers.labels(probe_outcome)
        for cause in UNJUDGED_CAUSES:
            self._unjudged.labels(cause)
        for event_outcome in EVALUATION_EVENT_OUTCOMES:
            self._evaluation_events.labels(event_outcome)
        self.judge = JudgeMetrics(registry)
        self.passages = PassageMetrics(registry)  # the passage store's (--passage-store)

    # -- quality ---------------------------------------------------------------------------

    def _labels(
        self, service: str | None, version: str | None, env: str | None
    ) -> tuple[tuple[str, ...], bool]:
        """Bounded label values, and whether this label set is new (has no series yet)."""
        with self._lock:
            labels, overflow, evicted = self._cap.map(
                service or UNKNOWN, version or UNKNOWN, env or UNKNOWN, self._clock()
            )
            first = labels not in self._known
            self._known.add(labels)
        for name in overflow:
            self._overflow.labels(name).inc()
        for svc, ver in evicted:
            self._forget_version(svc, ver)
        return labels, first

    def _forget_version(self, service: str, version: str) -> None:
        """Delete every series of a recycled version slot (all environments)."""
        with self._lock:
            gone = {k for k in self._known if k[:2] == (service, version)}
            self._known -= gone
        per_label_set = (
            self._answers,
            self._faithful,
            self._cited_ids,
            self._irrelevant,
            self._overlap,
        )
        for labels in gone:
            self._window_collector.manual.pop(labels, None)
            for metric in per_label_set:
                with contextlib.suppress(KeyError):
                    metric.remove(*labels)
            for verdict in VERDICTS:
                with contextlib.suppress(KeyError):
                    self._claims.remove(*labels, verdict)
            for pattern in PATTERNS:
                with contextlib.suppress(KeyError):
                    self._patterns.remove(*labels, pattern)
            self._window.forget(labels)

    def answer_counted(self, score: AnswerScore, span_id: str | None) -> None:
        """The monitor counted ``score`` (its commit is confirmed): the pipeline's sink."""
        self.record_answer(score)

    def record_answer(self, score: AnswerScore, *, trace_id: str | None = None) -> None:
        """Count one scored answer: its claims by verdict and the counts behind every ratio.

        A *cited* claim is a judged one with a citation (:data:`CITED_VERDICTS`); ``unjudged``
        claims are counted by verdict and nowhere else, so no ratio moves when the judge fails.
        ``trace_id`` (default: the score's) becomes an exemplar on the counters it increments,
        which is how a dashboard dip links to a trace.
        """
        labels, first = self._labels(score.service, score.version, score.environment)
        tid = trace_id if trace_id is not None else score.trace_id
        exemplar = {"trace_id": tid} if tid and len(tid) <= _MAX_TRACE_ID_CHARS else None

        verdicts = dict.fromkeys(VERDICTS, 0)
        patterns = dict.fromkeys(PATTERNS, 0)
        for claim in score.claims:
            verdicts[claim.verdict] += 1
            if claim.verdict == "misattributed":
                patterns[claim.pattern or "other"] += 1
        tally = Tally.of(score.claims)

        if first:
            # Create every verdict's series at 0 so ratios in PromQL see the whole mix from the
            # first scrape (a series born at 3 loses those 3 to rate()).
            for verdict in VERDICTS:
                self._claims.labels(*labels, verdict)
            for pattern in PATTERNS:
                self._patterns.labels(*labels, pattern)
            for metric in (
                self._faithful,
                self._cited_ids,
                self._irrelevant,
                self._overlap,
                self._quote_mismatches,
            ):
                metric.labels(*labels)
        self._answers.labels(*labels).inc(1, exemplar)
        for verdict, n in verdicts.items():
            if n:
                self._claims.labels(*labels, verdict).inc(n, exemplar)
        for pattern, n in patterns.items():
            if n:
                self._patterns.labels(*labels, pattern).inc(n, exemplar)
        for metric, n in (
            (self._faithful, tally.faithful),
            (self._cited_ids, tally.cited_ids),
            (self._irrelevant, tally.irrelevant_citations),
            (self._overlap, tally.overlap),
            (self._quote_mismatches, sum(c.quote_mismatch for c in score.claims)),
        ):
            if n:
                metric.labels(*labels).inc(n, exemplar)
        if tally.judged:
            self._window.add(labels, tally)
        for claim in score.claims:
            if claim.unjudged_cause is not None:
                self._unjudged.labels(claim.unjudged_cause).inc()
        if score.judge_calls_cut:
            self._calls_cut.inc(score.judge_calls_cut)

    def watch_held(self, held: Callable[[], tuple[int, int, float]]) -> None:
        """Export the held-trace gauges from ``held()`` (traces held with parts, bytes held,
        the oldest one's age in seconds), called at every scrape."""
        self._held.source = held

    def watch_traces(self, counts: Callable[[], dict[str, int]]) -> None:
        """Export ``citemon_traces_total{outcome}`` from ``counts()``, called at every scrape:
        the trace assembler's count of each of its outcomes
        (:meth:`citemon._otlp.assembly.TraceAssembler.outcomes`), every one of them, 0 included,
        so the series exist from the first scrape."""
        self._traces.source = counts

    def set_corrected_accuracy(
        self, *, service: str | None, version: str | None, environment: str | None, value: float
    ) -> None:
        """Publish a judge-corrected accuracy (Rogan–Gladen) for one label set by hand.

        With a ``calibration`` the windowed value replaces it wherever the window has counts.
        """
        labels, _ = self._labels(service, version, environment)
        self._window_collector.manual[labels] = float(value)

    def set_probe_sensitivity(self, value: float) -> None:
        """Publish a shuffle probe result by hand (1.0: shuffled citations all fail); the
        windowed value of :meth:`record_probe` replaces it while the window has one."""
        self._probe_sensitivity.set(value)

    # -- the shuffle probe -----------------------------------------------------------------

    def probe(self, outcome: ProbeOutcome, *, trace_id: str | None = None) -> None:
        """Count one answer picked for the probe that was not scored (or, internally, was)."""
        if outcome not in PROBE_OUTCOMES:
            raise ValueError(f"unknown probe outcome {outcome!r}")
        exemplar = (
            {"trace_id": trace_id} if trace_id and len(trace_id) <= _MAX_TRACE_ID_CHARS else None
        )
        self._probe_answers.labels(outcome).inc(1, exemplar)

    def record_probe(
        self, original: Tally, shuffled: Tally, *, trace_id: str | None = None
    ) -> None:
        """Add one answer's probe pair to the window: correct and cited claims of its real
        score and with rotated citations. Nothing here touches the quality metrics."""
        self._probe_window.add(_PROBE_KEY, ProbeCounts(original, shuffled))
        self.probe("scored", trace_id=trace_id)

    def probe_totals(self) -> ProbeCounts:
        """The probe window's sums (empty tallies when it is empty)."""
        for _, total in self._probe_window.totals():
            return total
        return ProbeCounts(Tally(), Tally())

    def _probe_value(self) -> float | None:
        return self.probe_totals().sensitivity

    # -- the consumer ----------------------------------------------------------------------

    def span(self, outcome: SpanOutcome, n: int = 1) -> None:
        """Count ``n`` consumed spans with one outcome."""
        if outcome not in SPAN_OUTCOMES:
            raise ValueError(f"unknown span outcome {outcome!r}")
        self._spans.labels(outcome).inc(n)

    def evaluation_events(self, outcome: str, n: int = 1) -> None:
        """Count ``n`` evaluation events with one outcome (called from the exporter's thread
        too: prometheus_client's counters are thread-safe)."""
        if outcome not in EVALUATION_EVENT_OUTCOMES:
            raise ValueError(f"unknown evaluation event outcome {outcome!r}")
        self._evaluation_events.labels(outcome).inc(n)

    def record_cut(self, record: str, reason: str) -> None:
        """Count one produced record cut to fit its topic (:data:`RECORD_CUTS`)."""
        if (record, reason) not in RECORD_CUTS:
            raise ValueError(f"unknown record cut {(record, reason)!r}")
        self._records_cut.labels(record, reason).inc()

    def client_error_repeated(self, logger: str) -> None:
        """Count one Kafka client message not logged because it repeats one that was."""
        self._client_errors.labels(logger).inc()

    def dead_letter(self, reason: str) -> None:
        """Count one message sent to the DLQ (``reason``: a ``DecodeError.reason`` code)."""
        self._dead_letters.labels(reason).inc()

    def consumer_lag(self, topic: str, partition: int, lag: int) -> None:
        """Set the lag of one assigned partition (log end − committed position)."""
        self._lag.labels(topic, str(partition)).set(max(0, lag))

    def forget_partition(self, topic: str, partition: int) -> None:
        """Drop a revoked partition's lag so two replicas never both report it."""
        with contextlib.suppress(KeyError):
            self._lag.remove(topic, str(partition))
