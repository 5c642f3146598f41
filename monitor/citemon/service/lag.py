"""``citemon_consumer_lag``: per assigned partition, the log end minus the committed offset.

The log ends are read every ``lag_interval_s`` (:meth:`LagReporter.update`); the gauge is also
republished after every commit (:meth:`LagReporter.publish`) against the ends last read, so it
drops as soon as work commits.
"""

from __future__ import annotations

from typing import Any

from citemon.metrics import Metrics
from citemon.service.offsets import OffsetTracker
from citemon.service.partitions import PartitionStates

__all__ = ["LagReporter"]


class LagReporter:
    """Keeps the log ends last read and publishes the lag gauge from them."""

    def __init__(
        self, tracker: OffsetTracker[Any], partitions: PartitionStates, metrics: Metrics
    ) -> None:
        self._tracker = tracker
        self._partitions = partitions
        self._metrics = metrics
        self.ends: dict[Any, int] = {}

    def publish(self) -> dict[Any, int]:
        """Set the gauge of every assigned partition whose committed offset is known."""
        lags: dict[Any, int] = {}
        for tp, end in self.ends.items():
            committed = self._tracker.committed(tp)
            if tp in self._partitions.assigned and committed is not None:
                lags[tp] = max(0, end - committed)
                self._metrics.consumer_lag(tp.topic, tp.partition, lags[tp])
        return lags

    async def update(self, consumer: Any) -> dict[Any, int]:
        """Read the log ends (and, where this process has committed nothing yet, the group's
        committed offset or the log start) and publish."""
        parts = self._partitions
        tps = [tp for tp in parts.assigned if tp not in parts.revoking]
        if consumer is None or not tps:
            return {}
        ends = await consumer.end_offsets(tps)
        missing = [tp for tp in tps if self._tracker.committed(tp) is None]
        if missing:
            starts = await consumer.beginning_offsets(missing)
            for tp in missing:
                committed = await consumer.committed(tp)
                self._tracker.set_committed(tp, starts[tp] if committed is None else committed)
        self.ends = {tp: ends[tp] for tp in tps}
        return self.publish()

    def forget(self, tp: Any) -> None:
        self.ends.pop(tp, None)
        self._metrics.forget_partition(tp.topic, tp.partition)
