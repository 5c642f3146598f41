"""The Prometheus metrics citemon exports (docs/design.md, "Metrics"), and the HTTP server for them.

:mod:`~citemon._metrics.definitions` the metrics and what feeds them,
:mod:`~citemon._metrics.labels` the bounded label values,
:mod:`~citemon._metrics.windows` the gauges computed at scrape time,
:mod:`~citemon._metrics.server` ``/metrics``, ``/healthz`` and ``/readyz``.
"""

from citemon._core.labels import OTHER, UNKNOWN
from citemon._metrics.definitions import (
    CITED_VERDICTS,
    EVALUATION_EVENT_OUTCOMES,
    JUDGE_OUTCOMES,
    SPAN_OUTCOMES,
    JudgeMetrics,
    Metrics,
    SpanOutcome,
)
from citemon._metrics.server import DEFAULT_METRICS_PORT, MetricsServer

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
