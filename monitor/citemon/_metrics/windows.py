"""Scrape-time gauges: the sliding windows behind ``citemon_citation_accuracy`` and friends,
the corrected accuracy computed from the very same counts, and gauges absent until first set.

A window is a ring of per-bucket counts (``window_s`` over ``buckets``); the ratios are computed
when Prometheus scrapes, as seen by *this* replica (counters are what add up across replicas).
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Final, Generic, Protocol, Self, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from citemon._core.tally import Tally
from citemon._metrics.labels import QUALITY_LABELS

if TYPE_CHECKING:
    from citemon._core.calibration import Calibration


class Summable(Protocol):
    """What a window holds per bucket: counts that add up (a :class:`~citemon._core.tally.Tally`,
    or the probe's :class:`~citemon._core.probe.ProbeCounts`)."""

    def __add__(self, other: Self, /) -> Self: ...


_C = TypeVar("_C", bound=Summable)


class Window(Generic[_C]):
    """Per-label-set ring of time buckets holding counts; ratios computed on demand.

    Memory is ``buckets`` counts per label set, and label sets are bounded by the caps.
    The window is exact to one bucket (``window_s / buckets``, 60 s at the defaults).
    """

    def __init__(self, *, window_s: float, buckets: int, clock: Callable[[], float]) -> None:
        if window_s <= 0 or buckets < 1:
            raise ValueError("window_s must be > 0 and buckets >= 1")
        self._bucket_s = window_s / buckets
        self._buckets = buckets
        self._clock = clock
        self._rings: dict[tuple[str, ...], deque[tuple[int, _C]]] = {}
        self._lock = threading.Lock()

    def add(self, key: tuple[str, ...], counts: _C) -> None:
        index = int(self._clock() // self._bucket_s)
        with self._lock:
            ring = self._rings.setdefault(key, deque(maxlen=self._buckets))
            if ring and ring[-1][0] == index:
                ring[-1] = (index, ring[-1][1] + counts)
            else:  # a copy: the window owns its counts (a Tally is mutable)
                ring.append((index, copy.deepcopy(counts)))

    def forget(self, key: tuple[str, ...]) -> None:
        with self._lock:
            self._rings.pop(key, None)

    def totals(self) -> Iterator[tuple[tuple[str, ...], _C]]:
        """Summed counts per label set over the window; drops label sets that went quiet."""
        oldest = int(self._clock() // self._bucket_s) - self._buckets + 1
        out: list[tuple[tuple[str, ...], _C]] = []
        with self._lock:
            for key in list(self._rings):
                ring = self._rings[key]
                while ring and ring[0][0] < oldest:
                    ring.popleft()
                if not ring:
                    del self._rings[key]
                    continue
                counts = iter(ring)
                total = copy.deepcopy(next(counts)[1])  # handed out: never the window's own
                for _, more in counts:
                    total = total + more
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
    :func:`~citemon._core.calibration.corrected_accuracy` declines (no cited claims, or an
    uninformative judge). Values set by hand (``manual``) show for label sets the window does
    not cover. The calibration's own sensitivity and specificity are exported too, so a recording
    rule can correct the accuracy pooled over all replicas (this gauge sees one replica's share).
    """

    _GAUGES: Final[tuple[tuple[str, str, Callable[[Tally], float | None]], ...]] = (
        (
            "citemon_citation_accuracy",
            "Correct cited claims / cited judged claims over the sliding window (this replica).",
            lambda t: t.citation_accuracy,
        ),
        (
            "citemon_citation_coverage",
            "Cited judged claims / judged claims over the sliding window (this replica).",
            lambda t: t.citation_coverage,
        ),
        (
            "citemon_faithfulness",
            "Faithful claims / judged claims over the sliding window (this replica).",
            lambda t: t.judged_faithfulness,
        ),
        (
            "citemon_ids_per_claim",
            "Mean cited IDs per cited judged claim over the sliding window (this replica).",
            lambda t: t.ids_per_claim,
        ),
    )

    def __init__(self, window: Window[Tally], calibration: Calibration | None = None) -> None:
        self._window = window
        self._calibration = calibration
        self.manual: dict[tuple[str, ...], float] = {}

    def describe(self) -> Iterable[Metric]:
        quality = [*((n, d) for n, d, _ in self._GAUGES), (_CORRECTED, _CORRECTED_HELP)]
        return [
            *(GaugeMetricFamily(n, d, labels=QUALITY_LABELS) for n, d in quality),
            *(GaugeMetricFamily(n, d) for n, d in _CALIBRATION_GAUGES),
        ]

    def collect(self) -> Iterable[Metric]:
        families = [
            (GaugeMetricFamily(n, d, labels=QUALITY_LABELS), of) for n, d, of in self._GAUGES
        ]
        corrected = dict(self.manual)
        for key, total in self._window.totals():
            for family, of in families:
                value = of(total)
                if value is not None:
                    family.add_metric(list(key), value)
            if self._calibration is not None:
                value = self._corrected(total.correct, total.cited)
                if value is None:
                    corrected.pop(key, None)
                else:
                    corrected[key] = value
        corrected_family = GaugeMetricFamily(_CORRECTED, _CORRECTED_HELP, labels=QUALITY_LABELS)
        for key, value in corrected.items():
            corrected_family.add_metric(list(key), value)
        out: list[Metric] = [*(family for family, _ in families), corrected_family]
        if self._calibration is not None:
            c = self._calibration.confusion
            for (name, doc), value in zip(
                _CALIBRATION_GAUGES, (c.sensitivity, c.specificity), strict=True
            ):
                if value is not None:
                    out.append(GaugeMetricFamily(name, doc, value=value))
        return out

    def _corrected(self, correct: int, cited: int) -> float | None:
        from citemon._core.calibration import corrected_accuracy

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
