"""Bounded work: how many records the next fetch may take, and pausing the partitions when none.

At most ``max_inflight_answers`` answers are scored and at most ``max_uncommitted_records``
records are fetched but not committed. Each fetch asks for no more records than there are free
slots; when there are none, every assigned partition is paused (the client stops prefetching
too) and resumed once work falls below :data:`RESUME_FRACTION` of both caps, while ``getmany``
keeps being called so the consumer stays in its group.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from citemon.service.partitions import PartitionStates
from citemon.service.settings import Settings

__all__ = ["RESUME_FRACTION", "Backpressure"]

log = logging.getLogger(__name__)

RESUME_FRACTION: Final = 0.75
"""Resume partitions when work falls below this share of a cap."""


class Backpressure:
    """Pauses and resumes the consumer's partitions around the two caps."""

    def __init__(self, settings: Settings, partitions: PartitionStates) -> None:
        self._settings = settings
        self._partitions = partitions
        self.paused = False

    def adjust(self, consumer: Any, answers: int, uncommitted: int) -> int:
        """Pause or resume for ``answers`` in flight and ``uncommitted`` records; returns the
        free slots (at most that many records may be fetched)."""
        s = self._settings
        free = min(s.max_inflight_answers - answers, s.max_uncommitted_records - uncommitted)
        below_low_water = (
            answers < s.max_inflight_answers * RESUME_FRACTION
            and uncommitted < s.max_uncommitted_records * RESUME_FRACTION
        )
        if free <= 0:
            self._set(consumer, True, answers)
        elif self.paused and below_low_water:
            self._set(consumer, False, answers)
        elif self.paused:
            self._set(consumer, True, answers)
        return free

    def _set(self, consumer: Any, paused: bool, answers: int) -> None:
        assigned = self._partitions.assigned
        if paused == self.paused:
            if paused:  # partitions assigned since we paused must pause too
                fresh = assigned - set(consumer.paused())
                if fresh:
                    consumer.pause(*fresh)
            return
        self.paused = paused
        if paused:
            consumer.pause(*assigned)
            log.info("work is full (%d answers in flight): partitions paused", answers)
        else:
            consumer.resume(*consumer.paused())
            log.info("partitions resumed")
