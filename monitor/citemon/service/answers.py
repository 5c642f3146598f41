"""The answers being scored: admitting each (dedupe, sampling) and scoring it in a job of its own.

An admitted answer holds the Kafka records it came from (:class:`~citemon.service.entries.Entry`)
until its job finishes, so no offset commits past an answer that is not scored. Its score is
put on the entry with the highest offset, to be produced and counted with that offset's commit;
a cancelled job (drain deadline, revoke) leaves its records unfinished, so the next owner scores
it again. At most ``max_inflight_answers`` jobs score at once (a semaphore).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from citemon.core.records import AnswerRecord, AnswerScore
from citemon.engine.scoring import Scorer
from citemon.metrics import Metrics
from citemon.service.dedupe import DedupeWindow
from citemon.service.entries import Entry
from citemon.service.gate import JudgeGate
from citemon.service.messages import add_dead_letter
from citemon.service.offsets import OffsetTracker
from citemon.service.retries import score_with_retries
from citemon.service.sampling import Sampler
from citemon.service.settings import Settings
from citemon.service.shuffle_probe import ShuffleProbes
from citemon.service.stats import PipelineStats

__all__ = ["AnswerJobs"]

log = logging.getLogger(__name__)


class AnswerJobs:
    """The scoring jobs in flight, each with the partitions of the records it holds."""

    def __init__(
        self,
        settings: Settings,
        scorer: Scorer,
        gate: JudgeGate,
        metrics: Metrics,
        *,
        sampler: Sampler,
        dedupe: DedupeWindow,
        tracker: OffsetTracker[Any],
        stats: PipelineStats,
        probes: ShuffleProbes,
        clock: Callable[[], float],
        on_change: Callable[[], None],
    ) -> None:
        self._settings = settings
        self._scorer = scorer
        self._gate = gate
        self._metrics = metrics
        self._sampler = sampler
        self._dedupe = dedupe
        self._tracker = tracker
        self._stats = stats
        self._probes = probes
        self._clock = clock
        self._on_change = on_change
        self._slots = asyncio.Semaphore(settings.max_inflight_answers)
        self.jobs: dict[asyncio.Task[None], frozenset[Any]] = {}
        self._traces: dict[asyncio.Task[None], str] = {}  # a job's trace ID, if any

    def __len__(self) -> int:
        return len(self.jobs)

    def admit(self, record: AnswerRecord, entries: list[Entry[Any]], timestamp_ms: int) -> None:
        """Start scoring ``record`` unless it was committed already or sampling leaves it out."""
        key = (record.trace_id, record.span_id)
        if key != (None, None) and key in self._dedupe:
            self._metrics.span("skipped")
            self._stats.duplicates += 1
            return
        now_s = timestamp_ms / 1000 if timestamp_ms >= 0 else time.time()
        if not self._sampler.by_trace_id(record.trace_id) or not self._sampler.by_budget(
            record.service, record.version, now_s
        ):
            self._metrics.span("sampled_out")
            self._stats.sampled_out += 1
            return
        self._metrics.span("answer")
        self._stats.answers_started += 1
        for e in entries:
            self._tracker.hold(e)
        task = asyncio.create_task(self.score(record, entries))
        self.jobs[task] = frozenset(e.tp for e in entries)
        if record.trace_id:
            self._traces[task] = record.trace_id
        task.add_done_callback(self._done)

    def in_partitions(self, tps: set[Any]) -> bool:
        """Whether a job holds a record of ``tps``."""
        return any(job_tps & tps for job_tps in self.jobs.values())

    def cancel(self, tps: set[Any]) -> set[str]:
        """Cancel the jobs holding records of ``tps``; returns their trace IDs."""
        dropped: set[str] = set()
        for task, job_tps in list(self.jobs.items()):
            if job_tps & tps:
                task.cancel()
                self._stats.cancelled_at_revoke += 1
                if task in self._traces:
                    dropped.add(self._traces[task])
        return dropped

    async def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for every job, then cancel the rest (counted)."""
        if not self.jobs:
            return
        log.info("draining %d answers in flight (up to %.0f s)", len(self.jobs), timeout_s)
        _, pending = await asyncio.wait(list(self.jobs), timeout=timeout_s)
        for task in pending:
            task.cancel()
        self._stats.cancelled_at_drain += len(pending)
        await asyncio.gather(*pending, return_exceptions=True)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.jobs.pop(task, None)
        self._traces.pop(task, None)
        self._on_change()
        if not task.cancelled() and task.exception() is not None:
            log.error("answer job failed", exc_info=task.exception())

    async def score(self, record: AnswerRecord, entries: list[Entry[Any]]) -> None:
        """One job: score ``record``, put its score on its last live entry, release the
        entries (unless cancelled), then maybe start its shuffle probe."""
        # A cancelled job (drain deadline, revoke) must leave its records unfinished, so their
        # offsets never commit and the next owner scores them: no release on cancellation.
        cancelled = False
        score: AnswerScore | None = None
        try:
            async with self._slots:
                try:
                    score = await score_with_retries(
                        record,
                        scorer=self._scorer,
                        gate=self._gate,
                        settings=self._settings,
                        stats=self._stats,
                        clock=self._clock,
                    )
                except Exception as exc:  # a scorer bug must not stop the stream
                    log.exception("scoring failed; dead-lettering the answer")
                    if entries:
                        value = record.model_dump_json().encode()
                        key = (record.trace_id or "").encode() or None
                        dlq = self._settings.dlq_topic
                        add_dead_letter(entries[-1], dlq, key, value, "score_error", repr(exc))
                    return
            # Counted only when this entry's offset commits; an answer whose entries all died
            # (revoked, lost) is counted by the partition's next owner, not here.
            home = max((e for e in entries if e.alive), key=lambda e: e.offset, default=None)
            if home is not None:
                home.scores.append((score, record.span_id))
                for e in entries:  # the answer's records of one partition commit together
                    if e.tp == home.tp and e is not home:
                        e.commit_with = max(e.commit_with, home.offset)
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            if not cancelled:
                for e in entries:
                    self._tracker.release(e)
        if score is not None:
            self._probes.maybe_start(record, score)
