"""Which answers get scored: a deterministic trace-ID ratio, then a per-version budget.

Two decisions, in this order:

1. **Ratio by trace ID** — exactly OpenTelemetry's ``TraceIdRatioBased``: keep the trace when its
   low 64 bits are below ``round(rate · 2⁶⁴)``. Every replica, every replay and every SDK that
   samples the same way agree on the same traces, so a replayed topic scores the same answers
   and a trace the service kept at rate r is kept here at any rate ≥ r.
2. **A token bucket per (service, version)**: at most ``budget_per_minute`` answers per minute
   of *traffic*, with a burst of one minute's budget. Per version, so a flood from one deploy
   cannot spend the judge budget of a new, quiet one. The bucket's clock is the record's own
   timestamp (the Kafka record time the producer set), not the wall clock: a backlog drained
   after a judge outage is sampled as it would have been live, instead of being mostly thrown
   away because it arrives all at once. The budget is per replica.

Both drops count as ``sampled_out``; :class:`Sampler` keeps them apart in ``dropped_by_ratio``
and ``dropped_by_budget`` for the shutdown log.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

__all__ = ["TRACE_ID_LIMIT", "Sampler", "TokenBucket", "ratio_bound", "trace_id_sampled"]

TRACE_ID_LIMIT: Final = (1 << 64) - 1
"""The low 64 bits of a trace ID are what ``TraceIdRatioBased`` compares."""


def ratio_bound(rate: float) -> int:
    """The bound ``TraceIdRatioBased`` derives from ``rate`` (same rounding)."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"sample rate must be within [0, 1], not {rate}")
    return round(rate * (TRACE_ID_LIMIT + 1))


def trace_id_sampled(trace_id: int | str, bound: int) -> bool:
    """Whether a trace (int, or 32 hex digits) is kept under ``bound`` (:func:`ratio_bound`)."""
    tid = int(trace_id, 16) if isinstance(trace_id, str) else trace_id
    return tid & TRACE_ID_LIMIT < bound


@dataclass(slots=True)
class TokenBucket:
    """``capacity`` tokens, refilled at ``rate_per_s``; time is whatever clock the caller uses.

    A timestamp earlier than the last one seen refills nothing (partitions interleave, so record
    times are not monotonic across them).
    """

    capacity: float
    rate_per_s: float
    tokens: float
    last_s: float

    def take(self, now_s: float) -> bool:
        if now_s > self.last_s:
            self.tokens = min(self.capacity, self.tokens + (now_s - self.last_s) * self.rate_per_s)
            self.last_s = now_s
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class Sampler:
    """The two decisions above. ``budget_per_minute=0`` disables the budget.

    At most ``max_keys`` (service, version) buckets are kept; the least recently used one is
    forgotten beyond that (it starts again full), so memory is bounded whatever the labels.
    """

    def __init__(
        self, *, rate: float = 1.0, budget_per_minute: float = 0.0, max_keys: int = 1000
    ) -> None:
        if budget_per_minute < 0:
            raise ValueError("budget_per_minute must be >= 0")
        if max_keys < 1:
            raise ValueError("max_keys must be >= 1")
        self.rate = rate
        self.bound = ratio_bound(rate)
        self.budget_per_minute = budget_per_minute
        self.max_keys = max_keys
        self._buckets: OrderedDict[tuple[str, str], TokenBucket] = OrderedDict()
        self.dropped_by_ratio = 0
        self.dropped_by_budget = 0

    def by_trace_id(self, trace_id: int | str | None) -> bool:
        """The ratio decision; an answer without a trace ID is kept only at rate 1."""
        if trace_id is None or trace_id == "":
            keep = self.bound > TRACE_ID_LIMIT
        else:
            try:
                keep = trace_id_sampled(trace_id, self.bound)
            except ValueError:
                keep = self.bound > TRACE_ID_LIMIT
        if not keep:
            self.dropped_by_ratio += 1
        return keep

    def by_budget(self, service: str | None, version: str | None, now_s: float) -> bool:
        """Take one answer from the (service, version) bucket at time ``now_s`` (seconds)."""
        if self.budget_per_minute <= 0:
            return True
        key = (service or "", version or "")
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(
                capacity=self.budget_per_minute,
                rate_per_s=self.budget_per_minute / 60.0,
                tokens=self.budget_per_minute,
                last_s=now_s,
            )
            self._buckets[key] = bucket
            if len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        keep = bucket.take(now_s)
        if not keep:
            self.dropped_by_budget += 1
        return keep

    def __repr__(self) -> str:
        return (
            f"Sampler(rate={self.rate:g}, budget_per_minute={self.budget_per_minute:g}, "
            f"dropped_by_ratio={self.dropped_by_ratio}, dropped_by_budget={self.dropped_by_budget})"
        )
