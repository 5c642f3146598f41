"""Test judges with known behaviour (not mocks of a server: stand-ins for a model's judgement)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from citemon._core.errors import JudgeError, JudgeHTTPError
from citemon._core.judge import CitedOutcome, CitedVerdict, Judge, SupportOutcome, SupportVerdict
from citemon._core.records import Verdict


class OracleJudge:
    """Entailed iff some shown passage is in the claim's supporter set (or a joint set is shown).

    ``support`` maps claim text → single passage IDs that entail it; ``joint`` maps claim text →
    sets of IDs that entail it only together. Every call is recorded as (claim, shown IDs).
    """

    def __init__(
        self,
        support: Mapping[str, set[str]],
        joint: Mapping[str, set[str]] | None = None,
        *,
        fail_on: set[str] | None = None,
    ) -> None:
        self.support = support
        self.joint = joint or {}
        self.fail_on = fail_on or set()
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        shown = tuple(passages)
        self.calls.append((claim, shown))
        if claim in self.fail_on:
            raise JudgeHTTPError("injected failure", status=503)
        ok = bool(self.support.get(claim, set()) & set(shown))
        joint = self.joint.get(claim)
        ok = ok or (joint is not None and joint <= set(shown))
        return Verdict(entailed=ok)


class YesJudge:
    """Says every claim is entailed: the blind judge the shuffle canary must catch."""

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        return Verdict(entailed=True)


def yes_judge() -> YesJudge:
    """A zero-argument factory, for ``--judge tests.oracles:yes_judge``."""
    return YesJudge()


SPECIMEN_TRUTH = {
    "Audit logs are retained for 90 days on the Business plan.": {"p-3310"},
    "Retention can be extended through a custom term in an Enterprise agreement.": {"p-3312"},
    "Changing it is not possible from the dashboard.": {"p-3311"},
}


def specimen_judge() -> OracleJudge:
    """The judgement the specimen (docs/design.md) assumes, for ``--judge
    tests.oracles:specimen_judge``."""
    return OracleJudge(SPECIMEN_TRUTH)


class SpecimenTextJudge:
    """The specimen's judgement by passage *text*, whatever IDs a framework gave the passages
    (LlamaIndex UUIDs, Haystack content hashes, positions): entailed iff a shown passage is
    the one that says the claim."""

    def __init__(self) -> None:
        from tests.integration.dialect_traces import PASSAGES

        self.truth = {
            claim: {PASSAGES[pid] for pid in pids} for claim, pids in SPECIMEN_TRUTH.items()
        }
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict:
        self.calls.append((claim, tuple(passages)))
        return Verdict(entailed=bool(self.truth.get(claim, set()) & set(passages.values())))


def specimen_text_judge() -> SpecimenTextJudge:
    """For ``--judge tests.oracles:specimen_text_judge``."""
    return SpecimenTextJudge()


class EntailsBatch:
    """Any :class:`Judge` with the batch methods built from its ``entails``: the reference
    semantics of :class:`~citemon._core.judge.BatchJudge` (whose docstring lists the calls this
    makes), and a way to run the scorer's batch path on a per-claim judge. It saves no calls.
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
