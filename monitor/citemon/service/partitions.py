"""Where the intake stands on each partition: assigned, being revoked, still opening, sought.

One object the state machine (:mod:`citemon.service.pipeline`) and the bad-batch recovery
(:mod:`citemon.service.recovery`) share, so the rule "take a partition's records only while it
is ours, open and past its floor" is written once (:meth:`PartitionStates.readable`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PartitionStates"]


class PartitionStates:
    """The consumer's partitions as the intake sees them."""

    def __init__(self) -> None:
        self.assigned: set[Any] = set()
        self.revoking: set[Any] = set()
        # Assigned partitions whose transactional producer is not yet open (records ignored)
        # and, once it is, the committed offset read after it fenced the previous owner.
        self.opening: set[Any] = set()
        self.floor: dict[Any, int] = {}
        # One past the last record taken (where intake stands), per assigned partition.
        self.taken_to: dict[Any, int] = {}
        # How often each partition was sought; a fetch made before a seek is stale there.
        self.seeks: dict[Any, int] = {}
        # Positions move only when getmany returns or raises, or on a seek: counted, so a check
        # spanning an await can tell they stood still. ``taking``: a fetch is being taken.
        self.moved = 0
        self.taking = False

    def readable(self, tp: Any) -> bool:
        """Whether records of ``tp`` may be taken now."""
        return tp in self.assigned and tp not in self.revoking and tp not in self.opening

    def all_readable(self) -> list[Any]:
        """The readable partitions, by partition number."""
        return sorted(
            self.assigned - self.revoking - self.opening, key=lambda tp: (tp.topic, tp.partition)
        )

    def sought(self, tp: Any) -> None:
        """``tp`` was sought: records of it fetched before are stale."""
        self.seeks[tp] = self.seeks.get(tp, 0) + 1
        self.moved += 1

    def assign(self, tps: set[Any], *, opening: bool) -> None:
        for tp in tps:  # a new owner's intake starts at the committed offset
            self.taken_to.pop(tp, None)
        self.assigned |= tps
        self.revoking -= tps
        if opening:
            self.opening |= tps

    def remove(self, tps: set[Any]) -> None:
        """``tps`` are revoked: forget them."""
        self.assigned -= tps
        self.opening -= tps
        for tp in tps:
            self.floor.pop(tp, None)
