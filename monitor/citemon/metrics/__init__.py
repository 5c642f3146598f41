"""The Prometheus metrics citemon exports (docs/design.md, "Metrics"), and the HTTP server for them.

:mod:`~citemon.metrics.definitions` the metrics and what feeds them, :mod:`~citemon.metrics.labels`
the bounded label values, :mod:`~citemon.metrics.windows` the gauges computed at scrape time,
:mod:`~citemon.metrics.server` ``/metrics``, ``/healthz`` and ``/readyz``.
"""

from citemon.core.labels import OTHER, UNKNOWN
from citemon.metrics.definitions import (
    CITED_VERDICTS,
    EVALUATION_EVENT_OUTCOMES,
    JUDGE_OUTCOMES,
    SPAN_OUTCOMES,
    JudgeMetrics,
    Metrics,
    SpanOutcome,
)
from citemon.metrics.server import DEFAULT_METRICS_PORT, MetricsServer

__all__ = [
    "CITED_VERDICTS",
    "DEFAULT_METRICS_PORT",
    "EVALUATION_EVENT_OUTCOMES",
    "JUDGE_OUTCOMES",
    "OTHER",
    "SPAN_OUTCOMES",
    "UNKNOWN",
    "JudgeMetrics",
    "Metrics",
    "MetricsServer",
    "SpanOutcome",
]
