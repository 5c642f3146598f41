"""Scoring one answer until the judge has answered for all of it, or its budget is spent.

An answer that comes back with judge failures is not finished: it is tried again. When *no*
judge request succeeded during its attempt, the judge is taken to be down
(:class:`~citemon.service.gate.JudgeGate`): the attempt is not charged to the answer and the
gate holds it until a probe gets through. Only failures while the judge is otherwise answering
(this answer's own problem) spend ``max_answer_attempts``, with exponential backoff between
attempts; after it the answer is recorded with its ``unjudged`` claims, which are counted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from citemon.core.records import AnswerRecord, AnswerScore
from citemon.engine.scoring import Scorer
from citemon.service.gate import JudgeGate, judge_failed
from citemon.service.settings import Settings
from citemon.service.stats import PipelineStats

__all__ = ["score_with_retries"]


async def score_with_retries(
    record: AnswerRecord,
    *,
    scorer: Scorer,
    gate: JudgeGate,
    settings: Settings,
    stats: PipelineStats,
    clock: Callable[[], float],
) -> AnswerScore:
    """``record``'s score once the judge answered for it (or its attempts ran out)."""
    s = settings
    attempts = 0
    while True:
        probe = await gate.acquire()
        started = clock()
        try:
            score = await scorer.score(record)
        except asyncio.CancelledError:
            if probe:
                gate.report(ok=False, started=float("inf"), probe=True)
            raise
        failed = judge_failed(score)
        if not failed and score.judge_calls == 0:
            # Nothing was asked (no claims, nothing retrieved): no evidence either way.
            gate.release(probe)
            return score
        outage = gate.report(ok=not failed, started=started, probe=probe)
        if not failed:
            return score
        if outage:
            continue  # the gate holds us until the judge answers again; no attempt spent
        attempts += 1
        if attempts >= s.max_answer_attempts:
            stats.unjudged_after_retries += 1
            return score
        stats.answer_retries += 1
        delay = min(s.answer_retry_backoff_s * 2 ** (attempts - 1), s.answer_retry_backoff_max_s)
        await asyncio.sleep(delay)
