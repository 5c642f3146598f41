"""The passage store's metrics: the :class:`~citemon._core.passages.PassageObserver` of
:class:`~citemon._passages.managed.ManagedStore` (docs/passage-store.md).

* ``citemon_passage_lookups_total{outcome}``: passage IDs asked of the store, by what became
  of each: ``cached`` (answered by the cache), ``fetched`` (the store gave its text),
  ``not_found`` (the store does not hold it: the claim stays ``no_passage_text``), ``failed``
  (the store failed after its retries: ``passage_lookup_failed``). The hit ratio is
  ``cached / sum``.
* ``citemon_passage_lookup_seconds``: the latency of each round trip to the store, every
  outcome included (``_count`` is the number of round trips).

No label carries the store's URL or a credential.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from citemon._core.passages import LOOKUP_OUTCOMES, LookupOutcome

__all__ = ["PassageMetrics"]

_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class PassageMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._lookups = Counter(
            "citemon_passage_lookups",
            "Passage IDs asked of the passage store, by outcome (cached, fetched, not_found, "
            "failed).",
            ["outcome"],
            registry=registry,
        )
        self._seconds = Histogram(
            "citemon_passage_lookup_seconds",
            "Passage store round-trip latency, every outcome included.",
            buckets=_BUCKETS_S,
            registry=registry,
        )
        for outcome in LOOKUP_OUTCOMES:
            self._lookups.labels(outcome)

    def looked_up(self, outcome: LookupOutcome, n: int) -> None:
        self._lookups.labels(outcome).inc(n)

    def round_trip(self, seconds: float, ok: bool) -> None:
        self._seconds.observe(max(0.0, seconds))
