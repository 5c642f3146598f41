"""Input records whose key is not their spans' trace ID, counted and warned about once.

The trace assembler joins a multi-span trace only when all its spans reach one replica: Kafka
puts records with one key on one partition, so each record must be keyed by its spans' trace
ID (the Collector's kafka exporter with ``partition_traces_by_id: true``, the shim's exporter).
A record keyed otherwise (no key, a service name, several traces in one record) still scores
its self-contained answers, but the parts of a multi-span trace may land on partitions other
replicas own, where they are never assembled. :class:`KeyCheck` counts every span that arrived
so (``citemon_spans_total{outcome="unkeyed"}``, besides its own outcome) and logs once, with
the fix, when such a record carries parts of a multi-span trace.
"""

from __future__ import annotations

import logging

from citemon._metrics import Metrics
from citemon._otlp.spans import DecodedBatch

__all__ = ["KeyCheck"]

log = logging.getLogger(__name__)


class KeyCheck:
    """Counts the spans of each decoded record whose key is not their trace ID."""

    def __init__(self, metrics: Metrics, *, topic: str) -> None:
        self._metrics = metrics
        self._topic = topic
        self.unkeyed = 0
        self.warned = False

    def check(self, key: bytes | None, batch: DecodedBatch) -> int:
        """Count ``batch``'s spans whose trace ID is not ``key``; returns how many."""
        text = bytes(key).decode("ascii", "replace").lower() if key else None
        n = sum(count for tid, count in batch.spans_per_trace.items() if tid != text)
        if not n:
            return 0
        self.unkeyed += n
        self._metrics.span("unkeyed", n)
        parts = [s for s in batch.spans if not s.answered and s.trace_id != text]
        if parts and not self.warned:
            self.warned = True
            log.warning(
                "spans of multi-span traces arrive on %s in records not keyed by their trace "
                "ID (key %r, trace %s): a trace whose spans land on partitions another replica "
                "owns is never assembled, and its answer never counted. Key the records by "
                "trace ID (the Collector's kafka exporter: partition_traces_by_id: true), or run "
                "with --rekey-topic TOPIC to re-key them here "
                '(citemon_spans_total{outcome="unkeyed"} counts such spans)',
                self._topic,
                text,
                parts[0].trace_id,
            )
        return n
