"""Scheduling the online shuffle probe (``--canary-rate``) so it stays out of the way.

An answer picked by its trace ID (:mod:`citemon.checks.shuffle_probe`) has its rotated citations
checked *after* its real score is handed to the commit, in a task of its own: at most
``max_inflight`` at once (more are dropped and counted), one attempt, every error caught and
counted, never retried, cancelled at shutdown. It shares the judge (and so its cap on requests
in flight) and skips while the judge is down; it cannot fail, delay or change the real answer,
and its scores reach only the probe's own metrics (``citemon_judge_canary_*``).
"""

from __future__ import annotations

import asyncio
import logging

from citemon.checks.shuffle_probe import probe_selected, shuffled_check
from citemon.core.errors import JudgeError
from citemon.core.probe import cited_counts
from citemon.core.records import AnswerRecord, AnswerScore
from citemon.engine.scoring import Scorer
from citemon.metrics import Metrics
from citemon.service.gate import JudgeGate, judge_failed

__all__ = ["ShuffleProbes"]

log = logging.getLogger(__name__)


class ShuffleProbes:
    """The shuffle probes in flight; :meth:`maybe_start` after each scored answer."""

    def __init__(
        self, scorer: Scorer, gate: JudgeGate, metrics: Metrics, *, rate: float, max_inflight: int
    ) -> None:
        self._scorer = scorer
        self._gate = gate
        self._metrics = metrics
        self._rate = rate
        self._max_inflight = max_inflight
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    def __len__(self) -> int:
        """Probes in flight."""
        return len(self._tasks)

    async def idle(self) -> None:
        """Return once no probe is in flight."""
        await self._idle.wait()

    def maybe_start(self, record: AnswerRecord, score: AnswerScore) -> None:
        """Start the probe of a scored answer when its trace ID picks it."""
        if not probe_selected(record.trace_id, self._rate):
            return
        if judge_failed(score) or self._gate.down:
            self._metrics.canary("failed", trace_id=record.trace_id)
            return
        if len(self._tasks) >= self._max_inflight:
            self._metrics.canary("dropped", trace_id=record.trace_id)
            return
        task = asyncio.create_task(self._probe(record, score), name="citemon-canary")
        self._tasks.add(task)
        self._idle.clear()
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._idle.set()

    async def stop(self) -> None:
        """Cancel probes still running: they hold no offsets, so nothing is lost."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _probe(self, record: AnswerRecord, score: AnswerScore) -> None:
        try:
            shuffled = await shuffled_check(self._scorer, record)
        except JudgeError as exc:
            log.info("shuffle canary: judge failed (%s); not counted", type(exc).__name__)
            self._metrics.canary("failed", trace_id=record.trace_id)
            return
        except Exception:  # the probe must never take anything down with it
            log.warning("shuffle canary failed", exc_info=True)
            self._metrics.canary("failed", trace_id=record.trace_id)
            return
        if shuffled is None:
            self._metrics.canary("skipped", trace_id=record.trace_id)
        else:
            original = cited_counts(score)
            self._metrics.record_canary(original, shuffled, trace_id=record.trace_id)
