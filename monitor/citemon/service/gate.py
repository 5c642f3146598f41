"""The judge gate: while the judge is down, answers wait instead of being scored ``unjudged``.

An outage is told from an answer's own failure by timing: an attempt that failed while no judge
request succeeded means the dependency is down, and counting its answers ``unjudged`` would put
an outage into the accuracy metric. The gate then holds every attempt (and, as work fills up,
intake: partitions pause) and lets one probe through at a time until one succeeds
(``docs/running.md``, "A judge outage delays, it does not degrade"). Any dependency an
attempt needs can report through :meth:`JudgeGate.report`; :class:`GateObserver` is the judge
observer that feeds the gate and the judge metrics with every request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from citemon.core.records import AnswerScore

log = logging.getLogger(__name__)

__all__ = ["OUTAGE_CAUSES", "GateObserver", "JudgeGate", "judge_failed"]

OUTAGE_CAUSES: Final[frozenset[str]] = frozenset({"judge_failure"})
"""The ``unjudged_cause`` values that are evidence about a dependency the answer needs (the
judge), not about the input: an answer with one is retried, and counts toward an outage."""


def judge_failed(score: AnswerScore) -> bool:
    """Whether any claim lacks a verdict because a dependency failed (:data:`OUTAGE_CAUSES`;
    a truncated answer or a cut search is no evidence about the judge)."""
    return any(c.unjudged_cause in OUTAGE_CAUSES for c in score.claims)


class JudgeGate:
    """Decides whether a judge failure is an outage, and meters the judge while it is down.

    ``request_ok`` is called for every successful judge request (:class:`GateObserver`) and
    every cleanly scored answer. A failed attempt during which nothing succeeded means the
    judge is down: :meth:`acquire` then holds every caller and releases one *probe* at a time,
    first come first served, every ``backoff`` seconds (doubling up to ``backoff_max_s``). A
    probe that succeeds reopens the gate for all.
    """

    def __init__(
        self,
        *,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        self._clock = clock
        self._last_ok = float("-inf")
        self.down_since: float | None = None
        self._backoff = backoff_s
        self._next_probe = 0.0
        self._probing = False
        self._waiters: deque[asyncio.Future[bool]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self.outages = 0
        self.probes = 0

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def request_ok(self) -> None:
        self._last_ok = self._clock()
        if self.down_since is not None:
            log.warning(
                "judge is answering again after %.1f s down; resuming",
                self._clock() - self.down_since,
            )
            self.down_since = None
            self._probing = False
            self._backoff = self._backoff_s
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            while self._waiters:
                fut = self._waiters.popleft()
                if not fut.done():
                    fut.set_result(False)

    async def acquire(self) -> bool:
        """Wait until the judge may be called; True when the caller is the outage's probe."""
        if self.down_since is None:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._dispatch()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.result():
                self._probing = False  # the probe was cancelled: let another go
                self._dispatch()
            raise

    def release(self, probe: bool) -> None:
        """An attempt that called no judge ended: as a probe it proved nothing, so let the
        next probe go (at the time already set)."""
        if probe:
            self._probing = False
            self._dispatch()

    def report(self, *, ok: bool, started: float, probe: bool) -> bool:
        """An attempt begun at ``started`` ended; returns whether its failure is an outage."""
        if probe:
            self._probing = False
        if ok:
            self.request_ok()
            return False
        if self._last_ok >= started:
            return False  # the judge answered others meanwhile: this answer's own failure
        now = self._clock()
        if self.down_since is None:
            self.down_since = now
            self.outages += 1
            self._backoff = self._backoff_s
            log.warning("judge is failing every request; holding answers and probing it")
        elif probe:
            self._backoff = min(self._backoff * 2, self._backoff_max_s)
        self._next_probe = now + self._backoff
        self._dispatch()
        return True

    def _dispatch(self) -> None:
        if self.down_since is None or self._probing:
            return
        while self._waiters and self._waiters[0].done():
            self._waiters.popleft()
        if not self._waiters:
            return
        delay = self._next_probe - self._clock()
        if delay > 0:
            if self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)
            return
        self._probing = True
        self.probes += 1
        self._waiters.popleft().set_result(True)

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()


class GateObserver:
    """A judge observer that feeds the metrics and tells the gate about every success."""

    def __init__(self, inner: Any, gate: JudgeGate) -> None:
        self._inner = inner
        self._gate = gate

    def request_done(self, outcome: str, seconds: float) -> None:
        if outcome == "ok":
            self._gate.request_ok()
        if self._inner is not None:
            self._inner.request_done(outcome, seconds)

    def inflight(self, delta: int) -> None:
        if self._inner is not None:
            self._inner.inflight(delta)

    def cache(self, hit: bool) -> None:
        if self._inner is not None:
            self._inner.cache(hit)

    def invalid_reply(self, cause: str) -> None:
        if self._inner is not None and hasattr(self._inner, "invalid_reply"):
            self._inner.invalid_reply(cause)

    def set_limit(self, max_inflight: int) -> None:
        if self._inner is not None and hasattr(self._inner, "set_limit"):
            self._inner.set_limit(max_inflight)
