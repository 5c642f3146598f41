"""Whether the intake has caught up: every owned partition read and committed to a target end.

What :meth:`Pipeline.caught_up <citemon.service.pipeline.Pipeline.caught_up>` and
``run(until_caught_up=True)`` (a burst mode, as arq's) wait for. For each partition this replica
owns, the target is the given end or, by default, its log end when first seen here (with
``read_committed``, the last stable offset). A partition has caught up when the intake's
position is at or past the target and nothing taken from it is uncommitted. The position, not
the committed offset, is compared: a transaction marker at the end of the log has no record to
commit, so the committed offset may stop one short of the end while the position passes it.

The positions are read with ``await``; they move only when ``getmany`` returns (or raises) or
a partition is sought, each counted in :attr:`PartitionStates.moved`. If that count stood still
while they were read and no fetch is being taken, the tracker holds every record below them, so
"nothing uncommitted" is exact.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from aiokafka.errors import IllegalStateError, KafkaError

from citemon.service.offsets import OffsetTracker
from citemon.service.partitions import PartitionStates

__all__ = ["CatchUp"]


class CatchUp:
    """The targets seen so far, and the check against them."""

    def __init__(self, partitions: PartitionStates, tracker: OffsetTracker[Any]) -> None:
        self._partitions = partitions
        self._tracker = tracker
        self.targets: dict[Any, int] = {}

    async def check(self, consumer: Any, ends: Mapping[Any, int] | None) -> dict[Any, int] | None:
        """The targets of the owned partitions once all are reached; None before."""
        parts = self._partitions
        if consumer is None or not parts.assigned or parts.opening:
            return None
        if parts.revoking & parts.assigned:
            return None
        if ends is not None:
            self.targets.update({tp: e for tp, e in ends.items() if tp not in self.targets})
        unknown = [tp for tp in parts.assigned if tp not in self.targets]
        if unknown:
            with contextlib.suppress(KafkaError, OSError, TimeoutError):
                self.targets.update(await consumer.end_offsets(unknown))
        moved = parts.moved
        owned = list(parts.assigned)
        positions: dict[Any, int] = {}
        for tp in owned:
            if tp not in self.targets:
                return None
            try:
                positions[tp] = await consumer.position(tp)
            except IllegalStateError:
                return None  # revoked meanwhile
        if parts.moved != moved or parts.taking or set(owned) != parts.assigned:
            return None
        if all(
            positions[tp] >= self.targets[tp] and self._tracker.uncommitted(tp) == 0 for tp in owned
        ):
            return {tp: self.targets[tp] for tp in owned}
        return None
