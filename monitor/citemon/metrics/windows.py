"""Scrape-time gauges: the sliding windows behind ``citemon_citation_accuracy`` and friends,
the corrected accuracy computed from the very same counts, and gauges absent until first set.

A window is a ring of per-bucket counts (``window_s`` over ``buckets``); the ratios are computed
when Prometheus scrapes, as seen by *this* replica (counters are what add up across replicas).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from citemon.metrics.labels import QUALITY_LABELS

if TYPE_CHECKING:
    from citemon.core.calibration import Calibration

# Indices into a bucket's counts.
CITED, CORRECT, JUDGED, FAITHFUL, IDS = range(5)
# ... and into the shuffle probe bucket's (one label set: the probe measures the judge).
ORIG_CORRECT, ORIG_CITED, SHUF_CORRECT, SHUF_CITED = range(4)
PROBE_KEY: Final = ("canary",)  # the shuffle probe's window key


class Window:
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


class WindowCollector:
    """Exposes the window's ratios as gauges; a label set with nothing to divide is omitted
    (an absent series is honest, a fake 0 or 1 is not).

    With a ``calibration``, ``citemon_citation_accuracy_corrected`` is the Rogan–Gladen point
    estimate of the same window's correct and cited counts, absent where
    :func:`~citemon.core.calibration.corrected_accuracy` declines (no cited claims, or an
    uninformative judge). Values set by hand (``manual``) show for label sets the window does
    not cover. The calibration's own sensitivity and specificity are exported too, so a recording
    rule can correct the accuracy pooled over all replicas (this gauge sees one replica's share).
    """

    _GAUGES: Final = (
        (
            "citemon_citation_accuracy",
            "Correct cited claims / cited judged claims over the sliding window (this replica).",
            CORRECT,
            CITED,
        ),
        (
            "citemon_citation_coverage",
            "Cited judged claims / judged claims over the sliding window (this replica).",
            CITED,
            JUDGED,
        ),
        (
            "citemon_faithfulness",
            "Faithful claims / judged claims over the sliding window (this replica).",
            FAITHFUL,
            JUDGED,
        ),
        (
            "citemon_ids_per_claim",
            "Mean cited IDs per cited judged claim over the sliding window (this replica).",
            IDS,
            CITED,
        ),
    )

    def __init__(self, window: Window, calibration: Calibration | None = None) -> None:
        self._window = window
        self._calibration = calibration
        self.manual: dict[tuple[str, ...], float] = {}

    def describe(self) -> Iterable[Metric]:
        quality = [*((n, d) for n, d, _, _ in self._GAUGES), (_CORRECTED, _CORRECTED_HELP)]
        return [
            *(GaugeMetricFamily(n, d, labels=QUALITY_LABELS) for n, d in quality),
            *(GaugeMetricFamily(n, d) for n, d in _CALIBRATION_GAUGES),
        ]

    def collect(self) -> Iterable[Metric]:
        families = [
            (GaugeMetricFamily(n, d, labels=QUALITY_LABELS), num, den)
            for n, d, num, den in self._GAUGES
        ]
        corrected = dict(self.manual)
        for key, total in self._window.totals():
            for family, num, den in families:
                if total[den] > 0:
                    family.add_metric(list(key), total[num] / total[den])
            if self._calibration is not None:
                value = self._corrected(int(total[CORRECT]), int(total[CITED]))
                if value is None:
                    corrected.pop(key, None)
                else:
                    corrected[key] = value
        corrected_family = GaugeMetricFamily(_CORRECTED, _CORRECTED_HELP, labels=QUALITY_LABELS)
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
        from citemon.core.calibration import corrected_accuracy

        assert self._calibration is not None
        # The point estimate does not depend on the bootstrap; one draw keeps a scrape cheap
        # (the full 4000-draw interval would cost ~10 ms per label set, every scrape).
        got = corrected_accuracy(correct, cited, self._calibration, draws=1)
        return None if got is None else got[0]


class OptionalGauge:
    """A label-less gauge that is *absent* until first set.

    For values where a default of 0 would lie: a probe sensitivity of 0 means "the judge
    cannot tell passages apart", which is not what "the probe has not run yet" means.
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
