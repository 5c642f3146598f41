"""What a consumed record carries until its offset commits: the record's :class:`Entry`, the
messages finishing it produced (:class:`OutMessage`), and a partition's committable run of
finished entries (:class:`Ready`).

Shared by :mod:`~citemon.service.offsets` (which orders them) and
:mod:`~citemon.service.delivery` (which produces and commits them), so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from citemon.core.records import AnswerScore

__all__ = ["TP", "Entry", "OutMessage", "Ready"]


@dataclass(frozen=True, slots=True)
class OutMessage:
    """A record to produce together with the commit (a result or a dead letter)."""

    topic: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    cut: tuple[tuple[str, str], ...] = ()
    """What was cut to make the record fit its topic, as (record, reason) pairs
    (:mod:`citemon.service.fitting`); counted once its commit succeeded."""


TP = TypeVar("TP", bound=Hashable)


@dataclass(slots=True, eq=False)
class Entry(Generic[TP]):
    """One consumed Kafka record and what finishing it produced.

    ``pending`` counts what still holds the record (its intake, each answer job, each trace
    part waiting for the rest of its trace); the record is finished at 0. ``alive`` turns false
    when its partition is revoked: late finishers then change nothing.
    """

    tp: TP
    offset: int
    timestamp_ms: int = -1
    pending: int = 1
    messages: list[OutMessage] = field(default_factory=list)
    scores: list[tuple[AnswerScore, str | None]] = field(default_factory=list)
    """Scored answers with their span ID; counted and published once the offset commits."""
    dead_letters: list[str] = field(default_factory=list)
    alive: bool = True
    commit_with: int = -1
    """The offset of the record this one must commit with (or after): a trace's parts in
    several records of one partition carry their answer on the last of them, so no commit may
    end between them (a revoke there left the next owner the later parts only, and the answer
    was never counted); -1 = none."""

    @property
    def done(self) -> bool:
        return self.pending <= 0


@dataclass(slots=True)
class Ready(Generic[TP]):
    """A partition's committable offset and the finished entries below it, in offset order."""

    tp: TP
    offset: int
    entries: list[Entry[TP]]
    cuts: list[tuple[str, str]] = field(default_factory=list)
    """What was cut of the records produced with this commit, as (record, reason) pairs
    (:mod:`citemon.service.fitting`): counted once it succeeded."""
