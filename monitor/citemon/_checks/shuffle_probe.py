"""The shuffle probe in production: is the judge still reading the passages it is shown?

(Its Prometheus metrics keep the names they had when the probe was called the "canary",
``citemon_judge_canary_*``, because the dashboards and alert rules read them:
:data:`citemon._metrics.definitions.LEGACY_NAMES`.)

``citemon run --probe-rate R`` re-checks a fraction ``R`` of the answers it scored with their
citations rotated between their cited sentences (:func:`citemon._checks.shuffle.rotate_citations`),
and exports how far citation accuracy fell, relative to the answers as cited:

    sensitivity = (acc_original − acc_shuffled) / acc_original

the definition of :attr:`citemon._checks.selftest.ShuffleResult.sensitivity`, pooled over the
probe's sliding window. A judge that checks *which* passage a claim cites sits near 1 on a healthy
service; a judge that has stopped discriminating (a model swap, a prompt regression, a proxy
that answers "yes") drifts to 0 while every quality gauge still looks fine.

Which answers: a hash of the trace ID (BLAKE2b, personalised, so independent of the sampler,
which compares the ID's low 64 bits) below ``R``; the rotation is seeded by the same hash, so a
replayed topic re-runs the very same probes. The shuffled results are never counted in the
quality metrics.

Cost: the original side is the answer's real score. The shuffled side re-runs only the citation
check, the way the scorer asks it (:func:`shuffled_check`), since accuracy is all the probe
compares: re-scored in full, a shuffled claim would fail its check and pay the faithfulness call
and the support search too, which say nothing about the judge (figures: docs/calibration.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Sequence
from typing import Final

from citemon._checks.shuffle import rotate_citations
from citemon._core.errors import JudgeError, JudgeInvalidReply
from citemon._core.judge import BatchJudge
from citemon._core.records import AnswerRecord, Claim
from citemon._core.tally import Tally
from citemon._engine.scoring import Scorer

__all__ = ["probe_selected", "shuffled_check"]

_PERSON: Final = b"citemon-canary"  # the hash's key from before the rename: changing it
# would change which answers are probed (a replay would probe others than the first run)
_SCALE: Final = float(1 << 64)


def _digest(trace_id: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(trace_id.encode(), digest_size=8, person=_PERSON).digest(), "big"
    )


def probe_selected(trace_id: str | None, rate: float) -> bool:
    """Whether the answer of ``trace_id`` is probed at ``rate`` (never without an ID)."""
    if rate <= 0.0 or not trace_id:
        return False
    return rate >= 1.0 or _digest(trace_id) / _SCALE < rate


async def shuffled_check(scorer: Scorer, record: AnswerRecord) -> Tally | None:
    """Correct and cited claims of the answer with its citations rotated (seeded by its trace
    ID), by the citation check alone: the counts :meth:`Scorer.score` would give the rotated
    claims, in one judge call per cited claim instead of up to 2 + (passages − 1).

    ``None`` when there is nothing to rotate, or when the producer truncated the answer (its
    failed claims would be ``unjudged``: no accuracy to compare). A judge failure raises its
    :class:`~citemon._core.errors.JudgeError`: the scorer would make the claim ``unjudged``, and a
    probe missing some claims would compare different claim sets.
    """
    if record.truncated:
        return None
    claims = await scorer.claims(record)
    moved = rotate_citations(claims, random.Random(_digest(record.trace_id or record.id or "")))
    if moved is None:
        return None
    passages = record.passage_map()
    if isinstance(scorer.judge, BatchJudge):
        return await _check_sets(scorer, scorer.judge, moved, passages)
    got = await asyncio.gather(
        *(_check(scorer, c, passages) for c in moved if c.cited), return_exceptions=True
    )
    _raise_first(got)
    return Tally(correct=sum(got), cited=len(got))  # type: ignore[arg-type]


def _raise_first(outcomes: Sequence[object]) -> None:
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome  # after every call has ended: none is left running unobserved


async def _check(scorer: Scorer, claim: Claim, passages: dict[str, str]) -> bool:
    """Step 1 of :mod:`citemon._engine.scoring`: do the cited passages entail the claim?"""
    cited = scorer.citable(claim, passages)
    if cited is None:
        return False
    verdict = await scorer.judge.entails(claim.text, {c: passages[c] for c in cited})
    return verdict.entailed


async def _check_sets(
    scorer: Scorer, judge: BatchJudge, claims: list[Claim], passages: dict[str, str]
) -> Tally:
    """Step 1 the way the scorer's batch path asks it: one call per distinct cited set."""
    cited = sum(claim.cited for claim in claims)
    grouped, _ = scorer.cited_sets(claims, passages)  # the very sets the real score asked
    sets = {key: [claims[i].text for i in members] for key, members in grouped.items()}

    async def check(key: tuple[str, ...], texts: list[str]) -> int:
        shown = {p: passages[p] for p in key}
        precise = scorer.PRECISION and len(shown) > 1  # the real score's prompt
        outcomes = await judge.check_citations(texts, shown, precision=precise)
        if len(outcomes) != len(texts):
            raise JudgeInvalidReply(f"batch judge gave {len(outcomes)} outcomes for {len(texts)}")
        for outcome in outcomes:
            if isinstance(outcome, JudgeError):
                raise outcome
        return sum(o.entailed for o in outcomes)  # type: ignore[union-attr]

    got = await asyncio.gather(*(check(k, t) for k, t in sets.items()), return_exceptions=True)
    _raise_first(got)
    return Tally(correct=sum(got), cited=cited)  # type: ignore[arg-type]
