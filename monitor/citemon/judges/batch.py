"""The optional batch capability of a judge: wire contract v2's two questions, and its reference
implementation.

The protocol and its outcome types (:class:`~citemon.core.judge.BatchJudge`, ``CitedVerdict``,
``SupportVerdict``) live in :mod:`citemon.core.judge`, so the scorer needs no judge module.

A judge that only has ``entails`` is asked about one claim and one passage set per call, so a
passage cited by five claims is sent five times and the misattribution search re-sends the whole
context once per failed claim and per passage. A judge that also implements :class:`BatchJudge`
is asked two questions per answer instead (the scorer uses them whenever they are there):

* :meth:`BatchJudge.check_citations` — one call per distinct cited-passage set, carrying every
  claim that cites exactly that set; the judge still sees only those passages. With
  ``precision`` (two or more passages) each entailed claim also says which passages entail it
  alone (``supported_by``) and which could be left out with the rest still entailing it
  (``dispensable``): ALCE's precision needs nothing more.
* :meth:`BatchJudge.find_support` — one call per answer, all retrieved passages, for the claims
  that failed their citation check or cite nothing: which single passages entail each claim
  (``supported_by``) and whether all of them jointly do (``joint``). That replaces v1's
  concatenated-context call and its per-passage search.

Both return one outcome per claim, in order: a verdict, or the :class:`JudgeError` that left that
claim without one (the scorer makes it ``unjudged``). A judge never raises for the whole batch
when some claims could be judged.

The fields mean exactly what these ``entails`` calls would answer, which is how
:class:`EntailsBatch` implements them (the reference semantics, and a way to run the scorer's
batch path on any judge)::

    check_citations  entailed     = entails(claim, shown)
                     supported_by = [p for p in shown if entails(claim, {p})]
                     dispensable  = [p for p in shown if entails(claim, shown - {p})]
    find_support     supported_by = [p for p in passages if entails(claim, {p})]
                     joint        = entails(claim, passages)
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from citemon.core.errors import JudgeError
from citemon.core.judge import (
    CitedOutcome,
    CitedVerdict,
    Judge,
    SupportOutcome,
    SupportVerdict,
)
from citemon.core.records import Verdict

__all__ = ["EntailsBatch"]


class EntailsBatch:
    """Any :class:`Judge` with the batch methods built from its ``entails`` (the reference).

    It saves no calls (it makes exactly the ones in the module docstring); it exists to define
    what a batch judge must answer and to run the scorer's batch path on a per-claim judge.
    """

    def __init__(self, judge: Judge) -> None:
        self.judge = judge

    def __repr__(self) -> str:
        return f"EntailsBatch({self.judge!r})"

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        return await self.judge.entails(claim, passages)

    async def check_citations(
        self, claims: Sequence[str], passages: Mapping[str, str], *, precision: bool
    ) -> list[CitedOutcome]:
        return list(
            await asyncio.gather(*(self._cited(c, passages, precision=precision) for c in claims))
        )

    async def find_support(
        self, claims: Sequence[str], passages: Mapping[str, str]
    ) -> list[SupportOutcome]:
        return list(await asyncio.gather(*(self._support(c, passages) for c in claims)))

    async def _cited(
        self, claim: str, shown: Mapping[str, str], *, precision: bool
    ) -> CitedOutcome:
        try:
            verdict = await self.judge.entails(claim, shown)
            if not (verdict.entailed and precision and len(shown) > 1):
                return CitedVerdict(
                    entailed=verdict.entailed, reason=verdict.reason, confidence=verdict.confidence
                )
            alone = [p for p in shown if (await self.judge.entails(claim, {p: shown[p]})).entailed]
            spare = [
                p
                for p in shown
                if (
                    await self.judge.entails(claim, {k: v for k, v in shown.items() if k != p})
                ).entailed
            ]
        except JudgeError as exc:
            return exc
        return CitedVerdict(
            entailed=True,
            reason=verdict.reason,
            confidence=verdict.confidence,
            supported_by=tuple(alone),
            dispensable=tuple(spare),
        )

    async def _support(self, claim: str, passages: Mapping[str, str]) -> SupportOutcome:
        try:
            joint = await self.judge.entails(claim, passages)
            alone = [
                p for p in passages if (await self.judge.entails(claim, {p: passages[p]})).entailed
            ]
        except JudgeError as exc:
            return exc
        return SupportVerdict(supported_by=tuple(alone), joint=joint.entailed, reason=joint.reason)
