"""The judge protocol: the only thing the scorer asks of a model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from citemon.engine.records import Verdict

__all__ = ["CPUJudge", "Judge", "JudgeObserver"]


@runtime_checkable
class Judge(Protocol):
    """Decides whether ``passages`` (ID → text) entail ``claim``.

    The scorer shows a judge only the passages under test: for a citation check, the cited ones.
    A judge raises :class:`citemon.errors.JudgeError` when it cannot answer; the scorer turns that
    into ``unjudged``, never into a verdict.
    """

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict: ...


@runtime_checkable
class CPUJudge(Protocol):
    """A judge whose verdict is pure computation (no I/O): the lexical and learned judges.

    ``check`` is the same verdict as ``entails``, synchronously. The monitor's scorer scores a
    CPU judge's answers in worker threads (each on a private event loop), so the judge must
    be thread-safe and its ``entails`` must not touch another event loop.
    """

    def check(self, claim: str, passages: Mapping[str, str]) -> Verdict: ...

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict: ...


@runtime_checkable
class JudgeObserver(Protocol):
    """Where a judge reports each request it makes (the metrics module implements this).

    ``outcome`` is one of ``ok``, ``error``, ``timeout``, ``rate_limited``, ``invalid``;
    ``inflight`` is called with +1 when a request starts and -1 when it ends. An observer may
    also have ``invalid_reply(cause)`` (:data:`citemon.errors.INVALID_REPLY_CAUSES`), called once
    per invalid reply; the HTTP judge calls it where it exists.
    """

    def request_done(self, outcome: str, seconds: float) -> None: ...

    def inflight(self, delta: int) -> None: ...

    def cache(self, hit: bool) -> None: ...
