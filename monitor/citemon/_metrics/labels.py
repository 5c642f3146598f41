"""Bounded label values: at most ``max_services`` services, ``max_environments`` environments
and ``max_versions`` versions per service get their own value; the rest fold into ``other``.

A version idle for ``version_idle_s`` gives its slot (and its series) to a new one, so a monitor
that runs for months still shows this week's deploy. Counted in ``citemon_label_overflow_total``
by :mod:`citemon._metrics.definitions`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from citemon._core.labels import OTHER

QUALITY_LABELS: Final = ("service", "version", "environment")


@dataclass
class _ServiceSlot:
    versions: dict[str, float] = field(default_factory=dict)  # version -> last seen (clock)


class LabelCap:
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
