"""The Prometheus metrics citemon exports, and the small HTTP server that serves them.

Every name, type and label here is a contract (DESIGN.md, "Metrics"): the alert rules and the
Grafana dashboard in ``grafana/`` read them, and ``tests/unit/test_grafana.py`` checks that every
name they use is one this module really exports.

Two kinds of numbers:

* **Counters** (answers, claims by verdict, faithful claims, cited IDs, …). Dashboards and alerts
  compute ratios from these because counters *add up across replicas*; a ratio does not.
* **Windowed gauges** (``citemon_citation_accuracy`` and friends): the same ratios over the last
  ``window_s`` seconds as seen by *this* replica, computed at scrape time from a ring of
  per-bucket counts. A convenience for ``curl /metrics`` and single-replica setups. With a
  judge calibration, ``citemon_citation_accuracy_corrected`` is computed in the same pass from
  the very counts behind ``citemon_citation_accuracy``; the shuffle canary's
  ``citemon_judge_canary_sensitivity`` has a window of its own (``canary_window_s``).

Cardinality is bounded: at most ``max_services`` services, ``max_environments`` environments and
``max_versions`` versions per service get their own label value; the rest are folded into
``other`` and counted in ``citemon_label_overflow_total{label}``. A version that has been idle
for ``version_idle_s`` gives its slot (and its series) to a new one, so a monitor that runs for
months still shows this week's deploy instead of folding every deploy after the 20th into
``other``.

Everything is built on a ``CollectorRegistry`` passed in; nothing touches the global registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Final, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from citemon.engine.records import UNJUDGED_CAUSES, VERDICTS, AnswerScore, VerdictName
from citemon.errors import INVALID_REPLY_CAUSES
from citemon.quality.canary import CANARY_OUTCOMES, CanaryOutcome, CitedCounts, canary_sensitivity

if TYPE_CHECKING:
    from citemon.quality.calibration import Calibration

__all__ = [
    "CITED_VERDICTS",
    "DEFAULT_METRICS_PORT",
    "JUDGE_OUTCOMES",
    "SPAN_OUTCOMES",
    "TRACE_OUTCOMES",
    "JudgeMetrics",
    "Metrics",
    "MetricsServer",
    "SpanOutcome",
]

log = logging.getLogger(__name__)

DEFAULT_METRICS_PORT: Final = 9464
"""The port DESIGN.md gives ``/metrics`` (the OpenTelemetry Prometheus exporter's default)."""

CITED_VERDICTS: Final[tuple[VerdictName, ...]] = (
    "correct",
    "misattributed",
    "multi_hop",
    "unsupported",
    "dangling",
)
"""Verdicts of *judged* claims that carry a citation: the denominator of citation accuracy.

``unjudged`` is excluded from every ratio (DESIGN.md) and ``uncited`` has no citation.
"""

JUDGE_OUTCOMES: Final = ("ok", "error", "timeout", "rate_limited", "invalid")
"""Values of ``citemon_judge_requests_total{outcome}`` (``JudgeError.outcome`` plus ``ok``)."""

SpanOutcome = Literal["answer", "sampled_out", "skipped", "invalid"]
"""What became of a consumed span: scored as an answer, sampled out, not an answer, undecodable."""

SPAN_OUTCOMES: Final[tuple[SpanOutcome, ...]] = ("answer", "sampled_out", "skipped", "invalid")

TRACE_OUTCOMES: Final = ("completed", "settled", "dropped_incomplete", "evicted", "superseded")
"""Values of ``citemon_traces_total{outcome}``: what the trace assembler did with multi-span
(OpenInference) traces. ``completed``: the root arrived with documents and an answer;
``settled``: scored without its root when its window ended (or memory ran short);
``dropped_incomplete``: settled without documents or an answer, not scored; ``evicted``: settled
or dropped *early* to keep the assembler within its caps (also counted in one of those two);
``superseded``: the trace carried a self-contained ``rag.answer`` span, which was scored instead.
"""

OTHER: Final = "other"
"""The label value overflowing services, versions and environments are folded into."""

UNKNOWN: Final = "unknown"
"""The label value for an answer whose span carried no service, version or environment.

Not the empty string: Prometheus treats ``service=""`` as a missing label, which breaks
``sum by (service, …)`` joins in the rules.
"""

_QUALITY_LABELS: Final = ("service", "version", "environment")

# Judge latency buckets, in seconds: LLM judges answer in 0.1-10 s; the tail matters for caps.
_JUDGE_BUCKETS_S: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

# An exemplar's label set may hold at most 128 UTF-8 characters (OpenMetrics); a W3C trace ID
# is 32 hex digits, so anything much longer is not a trace ID and is dropped, not sent.
_MAX_TRACE_ID_CHARS: Final = 64


def _build_version() -> str:
    try:
        return metadata.version("citemon")
    except metadata.PackageNotFoundError:
        return UNKNOWN


# ---------------------------------------------------------------------------------------------
# Label capping


@dataclass
class _ServiceSlot:
    versions: dict[str, float] = field(default_factory=dict)  # version -> last seen (clock)


class _LabelCap:
    """Maps raw (service, version, environment) to bounded label values.

    Returns the labels to use and, when a version slot was recycled, the evicted label set so
    the caller can delete its series.
    """

    def __init__(
        self,
        *,
        max_services: int,
        max_versions: int,
        max_environments: int,
        version_idle_s: float,
    ) -> None:
        self._max_services = max_services
        self._max_versions = max_versions
        self._max_environments = max_environments
        self._version_idle_s = version_idle_s
        self._services: dict[str, _ServiceSlot] = {}
        self._environments: set[str] = set()

    def map(
        self, service: str, version: str, environment: str, now: float
    ) -> tuple[tuple[str, str, str], list[str], list[tuple[str, str]]]:
        """Returns (labels, overflowed label names, evicted (service, version) pairs)."""
        overflow: list[str] = []
        evicted: list[tuple[str, str]] = []
        if environment not in self._environments:
            if len(self._environments) < self._max_environments:
                self._environments.add(environment)
            else:
                environment = OTHER
                overflow.append("environment")
        slot = self._services.get(service)
        if slot is None:
            if len(self._services) < self._max_services:
                slot = self._services[service] = _ServiceSlot()
            else:
                service = OTHER
                overflow.append("service")
                slot = self._services.setdefault(OTHER, _ServiceSlot())
        if version not in slot.versions and version != OTHER:
            real = [v for v in slot.versions if v != OTHER]
            if len(real) >= self._max_versions:
                oldest = min(real, key=slot.versions.__getitem__)
                if now - slot.versions[oldest] >= self._version_idle_s:
                    del slot.versions[oldest]
                    evicted.append((service, oldest))
                else:
                    version = OTHER
                    overflow.append("version")
        slot.versions[version] = now
        return (service, version, environment), overflow, evicted


# ---------------------------------------------------------------------------------------------
# Sliding-window ratios

# Indices into a bucket's counts.
_CITED, _CORRECT, _JUDGED, _FAITHFUL, _IDS = range(5)
# ... and into a canary bucket's (one label set: the canary measures the judge, not a service).
_ORIG_CORRECT, _ORIG_CITED, _SHUF_CORRECT, _SHUF_CITED = range(4)
_CANARY_KEY: Final = ("canary",)


class _Window:
    """Per-label-set ring of time buckets holding claim counts; ratios computed on demand.

    Memory is ``buckets`` small lists per label set, and label sets are bounded by the caps.
    The window is exact to one bucket (``window_s / buckets``, 60 s at the defaults).
    """

    def __init__(self, *, window_s: float, buckets: int, clock: Callable[[], float]) -> None:
        if window_s <= 0 or buckets < 1:
            raise ValueError("window_s must be > 0 and buckets >= 1")
        self._bucket_s = window_s / buckets
        self._buckets = buckets
        self._clock = clock
        self._rings: dict[tuple[str, ...], deque[tuple[int, list[float]]]] = {}
        self._lock = threading.Lock()

    def add(self, key: tuple[str, ...], counts: list[float]) -> None:
        index = int(self._clock() // self._bucket_s)
        with self._lock:
            ring = self._rings.setdefault(key, deque(maxlen=self._buckets))
            if ring and ring[-1][0] == index:
                last = ring[-1][1]
                for i, n in enumerate(counts):
                    last[i] += n
            else:
                ring.append((index, list(counts)))

    def forget(self, key: tuple[str, ...]) -> None:
        with self._lock:
            self._rings.pop(key, None)

    def totals(self) -> Iterator[tuple[tuple[str, ...], list[float]]]:
        """Summed counts per label set over the window; drops label sets that went quiet."""
        oldest = int(self._clock() // self._bucket_s) - self._buckets + 1
        out: list[tuple[tuple[str, ...], list[float]]] = []
        with self._lock:
            for key in list(self._rings):
                ring = self._rings[key]
                while ring and ring[0][0] < oldest:
                    ring.popleft()
                if not ring:
                    del self._rings[key]
                    continue
                total = [0.0] * len(ring[0][1])
                for _, counts in ring:
                    for i, n in enumerate(counts):
                        total[i] += n
                out.append((key, total))
        yield from out


_CORRECTED: Final = "citemon_citation_accuracy_corrected"
_CORRECTED_HELP: Final = (
    "Citation accuracy over the sliding window corrected for the judge's measured sensitivity "
    "and specificity (Rogan-Gladen; needs --calibration)."
)
_CALIBRATION_GAUGES: Final = (
    ("citemon_judge_sensitivity", "The --calibration file's judge sensitivity (point estimate)."),
    ("citemon_judge_specificity", "The --calibration file's judge specificity (point estimate)."),
)


class _WindowCollector:
    """Exposes the window's ratios as gauges; a label set with nothing to divide is omitted
    (an absent series is honest, a fake 0 or 1 is not).

    With a ``calibration``, ``citemon_citation_accuracy_corrected`` is the Rogan–Gladen point
    estimate of the same window's correct and cited counts, absent where
    :func:`~citemon.quality.calibration.corrected_accuracy` declines (no cited claims, or an
    uninformative judge). Values set by hand (``manual``) show for label sets the window does
    not cover. The calibration's own sensitivity and specificity are exported too, so a recording
    rule can correct the accuracy pooled over all replicas (this gauge sees one replica's share).
    """

    _GAUGES: Final = (
        (
            "citemon_citation_accuracy",
            "Correct cited claims / cited judged claims over the sliding window (this replica).",
            _CORRECT,
            _CITED,
        ),
        (
            "citemon_citation_coverage",
            "Cited judged claims / judged claims over the sliding window (this replica).",
            _CITED,
            _JUDGED,
        ),
        (
            "citemon_faithfulness",
            "Faithful claims / judged claims over the sliding window (this replica).",
            _FAITHFUL,
            _JUDGED,
        ),
        (
            "citemon_ids_per_claim",
            "Mean cited IDs per cited judged claim over the sliding window (this replica).",
            _IDS,
            _CITED,
        ),
    )

    def __init__(self, window: _Window, calibration: Calibration | None = None) -> None:
        self._window = window
        self._calibration = calibration
        self.manual: dict[tuple[str, ...], float] = {}

    def describe(self) -> Iterable[Metric]:
        quality = [*((n, d) for n, d, _, _ in self._GAUGES), (_CORRECTED, _CORRECTED_HELP)]
        return [
            *(GaugeMetricFamily(n, d, labels=_QUALITY_LABELS) for n, d in quality),
            *(GaugeMetricFamily(n, d) for n, d in _CALIBRATION_GAUGES),
        ]

    def collect(self) -> Iterable[Metric]:
        families = [
            (GaugeMetricFamily(n, d, labels=_QUALITY_LABELS), num, den)
            for n, d, num, den in self._GAUGES
        ]
        corrected = dict(self.manual)
        for key, total in self._window.totals():
            for family, num, den in families:
                if total[den] > 0:
                    family.add_metric(list(key), total[num] / total[den])
            if self._calibration is not None:
                value = self._corrected(int(total[_CORRECT]), int(total[_CITED]))
                if value is None:
                    corrected.pop(key, None)
                else:
                    corrected[key] = value
        corrected_family = GaugeMetricFamily(_CORRECTED, _CORRECTED_HELP, labels=_QUALITY_LABELS)
        for key, value in corrected.items():
            corrected_family.add_metric(list(key), value)
        out: list[Metric] = [*(family for family, _, _ in families), corrected_family]
        if self._calibration is not None:
            c = self._calibration.confusion
            for (name, doc), value in zip(
                _CALIBRATION_GAUGES, (c.sensitivity, c.specificity), strict=True
            ):
                if value is not None:
                    out.append(GaugeMetricFamily(name, doc, value=value))
        return out

    def _corrected(self, correct: int, cited: int) -> float | None:
        from citemon.quality.calibration import corrected_accuracy

        assert self._calibration is not None
        # The point estimate does not depend on the bootstrap; one draw keeps a scrape cheap
        # (the full 4000-draw interval would cost ~10 ms per label set, every scrape).
        got = corrected_accuracy(correct, cited, self._calibration, draws=1)
        return None if got is None else got[0]


class _OptionalGauge:
    """A label-less gauge that is *absent* until first set.

    For values where a default of 0 would lie: a canary sensitivity of 0 means "the judge
    cannot tell passages apart", which is not what "the canary has not run yet" means.
    ``compute``, when given, is asked at scrape time and wins over a set value unless it
    returns ``None``.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        registry: CollectorRegistry,
        compute: Callable[[], float | None] | None = None,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._value: float | None = None
        self._compute = compute
        registry.register(self)

    def set(self, value: float) -> None:
        self._value = float(value)

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(self._name, self._documentation)]

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self._name, self._documentation)
        value = self._compute() if self._compute is not None else None
        if value is None:
            value = self._value
        if value is not None:
            family.add_metric([], value)
        return [family]


# ---------------------------------------------------------------------------------------------
# The metrics


class _TraceCollector:
    """``citemon_traces_total{outcome}``, read from the assembler's own counts at scrape time
    (the assembler counts; nothing is copied, so nothing can drift)."""

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
        for outcome in TRACE_OUTCOMES:
            family.add_metric([outcome], counts.get(outcome, 0))
        yield family


class JudgeMetrics:
    """The :class:`citemon.judges.base.JudgeObserver` that feeds the judge metrics.

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
        self._limit = _OptionalGauge(
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
    the windowed corrected accuracy; ``canary_window_s`` (default ``window_s``) is the span of
    the shuffle canary's sums, longer because the canary sees only a small share of answers.
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
        canary_window_s: float | None = None,
    ) -> None:
        if min(max_versions, max_services, max_environments) < 1:
            raise ValueError("label caps must be >= 1")
        self._clock = clock
        self._lock = threading.Lock()
        self._cap = _LabelCap(
            max_services=max_services,
            max_versions=max_versions,
            max_environments=max_environments,
            version_idle_s=version_idle_s,
        )
        self._known: set[tuple[str, ...]] = set()  # label sets with series
        self._window = _Window(window_s=window_s, buckets=window_buckets, clock=clock)
        self._window_collector = _WindowCollector(self._window, calibration)
        registry.register(self._window_collector)
        self._canary_window = _Window(
            window_s=canary_window_s or window_s, buckets=window_buckets, clock=clock
        )
        labels = list(_QUALITY_LABELS)
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
        self._canary = _OptionalGauge(
            "citemon_judge_canary_sensitivity",
            "How far accuracy fell on shuffled citations relative to unshuffled, over the canary "
            "window (shuffle canary; 0 = the judge ignores which passage is cited).",
            registry,
            compute=self._canary_value,
        )
        self._canary_answers = Counter(
            "citemon_judge_canary_answers",
            "Answers picked for the shuffle canary, by outcome (scored, skipped, failed, dropped).",
            ["outcome"],
            registry=registry,
        )
        self._spans = Counter(
            "citemon_spans",
            "Consumed spans by outcome (answer, sampled_out, skipped, invalid).",
            ["outcome"],
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
        self._traces = _TraceCollector()
        registry.register(self._traces)
        Gauge(
            "citemon_build_info", "citemon's own version.", ["version"], registry=registry
        ).labels(build_version or _build_version()).set(1)
        for outcome in SPAN_OUTCOMES:
            self._spans.labels(outcome)
        for name in _QUALITY_LABELS:
            self._overflow.labels(name)
        for canary_outcome in CANARY_OUTCOMES:
            self._canary_answers.labels(canary_outcome)
        for cause in UNJUDGED_CAUSES:
            self._unjudged.labels(cause)
        self.judge = JudgeMetrics(registry)

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
            self._window.forget(labels)

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
        faithful = cited_ids = irrelevant = overlap = 0
        for claim in score.claims:
            verdicts[claim.verdict] += 1
            if claim.verdict == "unjudged":
                continue
            faithful += claim.faithful is True
            if claim.verdict in CITED_VERDICTS:
                cited_ids += len(claim.cited_ids)
                irrelevant += len(claim.irrelevant_ids)
                overlap += claim.verdict == "misattributed" and claim.overlap

        if first:
            # Create every verdict's series at 0 so ratios in PromQL see the whole mix from the
            # first scrape (a series born at 3 loses those 3 to rate()).
            for verdict in VERDICTS:
                self._claims.labels(*labels, verdict)
            for metric in (self._faithful, self._cited_ids, self._irrelevant, self._overlap):
                metric.labels(*labels)
        self._answers.labels(*labels).inc(1, exemplar)
        for verdict, n in verdicts.items():
            if n:
                self._claims.labels(*labels, verdict).inc(n, exemplar)
        for metric, n in (
            (self._faithful, faithful),
            (self._cited_ids, cited_ids),
            (self._irrelevant, irrelevant),
            (self._overlap, overlap),
        ):
            if n:
                metric.labels(*labels).inc(n, exemplar)

        cited = sum(verdicts[v] for v in CITED_VERDICTS)
        judged = cited + verdicts["uncited"]
        if judged:
            counts = [0.0] * 5
            counts[_CITED] = cited
            counts[_CORRECT] = verdicts["correct"]
            counts[_JUDGED] = judged
            counts[_FAITHFUL] = faithful
            counts[_IDS] = cited_ids
            self._window.add(labels, counts)
        for claim in score.claims:
            if claim.unjudged_cause is not None:
                self._unjudged.labels(claim.unjudged_cause).inc()
        if score.judge_calls_cut:
            self._calls_cut.inc(score.judge_calls_cut)

    def watch_traces(self, counts: Callable[[], dict[str, int]]) -> None:
        """Export ``citemon_traces_total{outcome}`` from ``counts()`` (the trace assembler's
        outcome counts, :data:`TRACE_OUTCOMES`), called at every scrape."""
        self._traces.source = counts

    def set_corrected_accuracy(
        self, *, service: str | None, version: str | None, environment: str | None, value: float
    ) -> None:
        """Publish a judge-corrected accuracy (Rogan–Gladen) for one label set by hand.

        With a ``calibration`` the windowed value replaces it wherever the window has counts.
        """
        labels, _ = self._labels(service, version, environment)
        self._window_collector.manual[labels] = float(value)

    def set_canary_sensitivity(self, value: float) -> None:
        """Publish a shuffle canary result by hand (1.0: shuffled citations all fail); the
        windowed value of :meth:`record_canary` replaces it while the window has one."""
        self._canary.set(value)

    # -- the shuffle canary ----------------------------------------------------------------

    def canary(self, outcome: CanaryOutcome, *, trace_id: str | None = None) -> None:
        """Count one answer picked for the canary that was not scored (or, internally, was)."""
        if outcome not in CANARY_OUTCOMES:
            raise ValueError(f"unknown canary outcome {outcome!r}")
        exemplar = (
            {"trace_id": trace_id} if trace_id and len(trace_id) <= _MAX_TRACE_ID_CHARS else None
        )
        self._canary_answers.labels(outcome).inc(1, exemplar)

    def record_canary(
        self, original: CitedCounts, shuffled: CitedCounts, *, trace_id: str | None = None
    ) -> None:
        """Add one answer's canary pair to the window: correct and cited claims of its real
        score and with rotated citations. Nothing here touches the quality metrics."""
        counts = [0.0] * 4
        counts[_ORIG_CORRECT], counts[_ORIG_CITED] = original
        counts[_SHUF_CORRECT], counts[_SHUF_CITED] = shuffled
        self._canary_window.add(_CANARY_KEY, counts)
        self.canary("scored", trace_id=trace_id)

    def canary_totals(self) -> tuple[float, float, float, float]:
        """The canary window's (original correct, original cited, shuffled correct, shuffled
        cited); zeros when it is empty."""
        for _, total in self._canary_window.totals():
            return total[0], total[1], total[2], total[3]
        return 0.0, 0.0, 0.0, 0.0

    def _canary_value(self) -> float | None:
        return canary_sensitivity(*self.canary_totals())

    # -- the consumer ----------------------------------------------------------------------

    def span(self, outcome: SpanOutcome, n: int = 1) -> None:
        """Count ``n`` consumed spans with one outcome."""
        if outcome not in SPAN_OUTCOMES:
            raise ValueError(f"unknown span outcome {outcome!r}")
        self._spans.labels(outcome).inc(n)

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


# ---------------------------------------------------------------------------------------------
# The HTTP endpoint

_MAX_REQUEST_HEAD_BYTES: Final = 16 * 1024


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on one asyncio server (stdlib only).

    It runs on the monitor's own event loop on purpose: if the loop is stuck, ``/healthz``
    stops answering and the liveness probe restarts the pod — a server in a thread would keep
    saying "alive" for a dead pipeline. ``/metrics`` speaks OpenMetrics when the scraper asks
    for it (Prometheus does), which is the only format that carries exemplars.

    ``live`` and ``ready`` are cheap callables the pipeline owns: ``/healthz`` is 200 while
    ``live()`` is true, ``/readyz`` is 200 only while ``ready()`` is (partitions assigned).
    Use ``async with MetricsServer(...) as server``; ``server.port`` is the bound port (pass
    ``port=0`` in tests).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str = "0.0.0.0",
        port: int = DEFAULT_METRICS_PORT,
        ready: Callable[[], bool] = lambda: True,
        live: Callable[[], bool] = lambda: True,
        read_timeout_s: float = 5.0,
    ) -> None:
        self._registry = registry
        self._host = host
        self._port = port
        self._ready = ready
        self._live = live
        self._read_timeout_s = read_timeout_s
        self._server: asyncio.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("server not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def task(self) -> asyncio.Task[None]:
        """The task serving requests: it ends only when the server closes (give it to
        :meth:`citemon.service.pipeline.Pipeline.supervise`)."""
        if self._task is None:
            raise RuntimeError("server not started")
        return self._task

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._handle, self._host, self._port, limit=_MAX_REQUEST_HEAD_BYTES
        )
        self._task = asyncio.create_task(self._server.serve_forever(), name="citemon-metrics")
        log.info("metrics on http://%s:%d/metrics", self._host, self.port)

    async def stop(self) -> None:
        """Stop listening and hang up on clients still mid-request (a stalled scraper)."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()
            self._server = None
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def __aenter__(self) -> MetricsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            try:
                head = await asyncio.wait_for(
                    reader.readuntil(b"\r\n\r\n"), timeout=self._read_timeout_s
                )
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                return
            status, ctype, body, head_only = self._respond(head.decode("latin-1"))
            writer.write(
                (
                    f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                ).encode("latin-1")
            )
            if not head_only:
                writer.write(body)
            await writer.drain()
        except (ConnectionError, OSError):
            pass  # the scraper went away; nothing to tell it
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    def _respond(self, head: str) -> tuple[str, str, bytes, bool]:
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        text = "text/plain; charset=utf-8"
        if len(parts) != 3:
            return "400 Bad Request", text, b"bad request\n", False
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", text, b"method not allowed\n", False
        head_only = method == "HEAD"
        path = target.split("?", 1)[0]
        if path == "/metrics":
            accept = ""
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "accept":
                    accept = value.strip()
            encoder, ctype = choose_encoder(accept)
            return "200 OK", ctype, encoder(self._registry), head_only
        if path == "/healthz":
            ok = self._live()
            return _probe(ok, "alive" if ok else "not alive", head_only)
        if path == "/readyz":
            ok = self._ready()
            return _probe(ok, "ready" if ok else "not ready", head_only)
        return "404 Not Found", text, b"not found\n", head_only


def _probe(ok: bool, word: str, head_only: bool) -> tuple[str, str, bytes, bool]:
    status = "200 OK" if ok else "503 Service Unavailable"
    return status, "text/plain; charset=utf-8", f"{word}\n".encode(), head_only
