"""Per-answer scoring: the citation check, faithfulness, the failure taxonomy, precision.

The judge calls per claim, in order (the steps with the specimen: docs/metric.md):

1. the cited passages only. A pass is ``correct`` *and* faithful with no further call, because a
   passage that entails the claim is part of the context;
2. for a failed or uncited claim, the joined context (faithfulness);
3. for a failed claim the context entails, each other passage alone: some → ``misattributed``,
   none → ``multi_hop``. One the context does not entail is ``unsupported`` without a search, since
   no single passage entails what all of them together do not;
4. for a ``correct`` claim citing two or more passages, ALCE's citation precision.

A judge error wherever a verdict depends on it makes the claim ``unjudged``: nothing is guessed.

Step 3 alone grows with the passages, so ``max_judge_calls_per_answer`` bounds it: steps 1, 2
and 4 of every claim come first, the rest is shared fairly among the claims that search, and each
searches in order of content words shared with the claim. A cut claim that found no supporter is
``unjudged`` (``search_cut``), not ``multi_hop``: that no single passage supports it was not
checked.

A :class:`~citemon._core.judge.BatchJudge` is asked the same questions in fewer calls, with the
same verdicts. Given an ``executor``, the CPU work (a CPU judge's whole answer, else sentence
splitting and ranking) runs off the caller's loop, so heartbeats and ``/healthz`` keep answering
while a huge answer is scored. The verdict rules are :mod:`citemon._engine.verdicts`, each
misattributed claim's pattern :mod:`citemon._engine.patterns`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from citemon._core.errors import ConfigError, JudgeError, JudgeInvalidReply
from citemon._core.judge import (
    BatchJudge,
    CitedOutcome,
    CPUJudge,
    Judge,
    SupportOutcome,
    SupportVerdict,
)
from citemon._core.passages import PassageStore
from citemon._core.records import AnswerRecord, AnswerScore, Claim, ClaimResult, Verdict
from citemon._core.text import CitationSyntax
from citemon._engine.claims import extract_claims
from citemon._engine.excerpts import excerpts
from citemon._engine.passage_text import DEFAULT_HASH_KEY, fill_from_store
from citemon._engine.patterns import assign_patterns
from citemon._engine.settings import DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER, Policy, ScoringSettings
from citemon._engine.support_search import allot, by_overlap
from citemon._engine.verdicts import (
    apply_lookup_failure,
    apply_truncation,
    attribute,
    citation_groups,
    mark_correct,
    mark_unjudged,
    merge_textless,
    needs_search,
    open_result,
)

__all__ = [
    "DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER",
    "Policy",
    "Scorer",
]

_R = TypeVar("_R")
_T = TypeVar("_T")
_WAVE: Final = 256  # claims of one answer checked concurrently


class _Unjudged(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


@dataclass(slots=True)
class _Calls:
    """One answer's judge calls so far."""

    made: int = 0


@dataclass(slots=True)
class _Search:
    """A faithful claim whose citation failed: the passages its support is searched in."""

    index: int
    cited: list[str]
    others: list[str]
    asked: list[str] = field(default_factory=list)


class Scorer:
    """Scores answers with one judge; many answers may be scored concurrently.

    The judge owns its own cap on requests in flight, so concurrency here only bounds how many
    answers are held in memory at once (``max_concurrent_answers`` in :meth:`score_many`).
    """

    PRECISION: Final = True
    """Citation precision is always asked of a citation set of two or more passages (the shuffle
    probe asks it the same way, so that its prompt is the real score's)."""

    def __init__(
        self,
        judge: Judge,
        settings: ScoringSettings | None = None,
        *,
        executor: Executor | None = None,
        passages: PassageStore | None = None,
        passage_hash_key: str | None = None,
    ) -> None:
        self.judge = judge
        self.settings = settings if settings is not None else ScoringSettings.defaults()
        """How claims are checked: the settings themselves (``score``'s flags, ``run``'s
        ``settings.scoring``), not a copy of them."""
        self.syntax: CitationSyntax = self.settings.syntax
        """The citation markers and metadata keys, compiled once."""
        self.executor = executor
        """Where CPU-bound work runs (None: inline, on the caller's event loop)."""
        self.passages = passages
        """Where the text of passages that arrived without it is looked up (``--passage-store``),
        once per answer, on the caller's loop, before anything else."""
        self.passage_hash_key: str = passage_hash_key or str(
            getattr(passages, "hash_key", DEFAULT_HASH_KEY)
        )
        """The metadata key of a passage's content hash (the store's ``hash_key`` by default)."""
        if self.settings.decompose == "llm" and not hasattr(judge, "decompose"):
            raise ConfigError("--decompose llm needs a judge that can decompose (the http judge)")
        if self.settings.max_judge_calls_per_answer < 0:  # settings built without validation
            raise ConfigError("--max-judge-calls-per-answer must be 0 (no bound) or more")
        self._cpu_judge = isinstance(judge, CPUJudge)
        self._inline = Scorer(judge, self.settings) if executor is not None else None

    async def _cpu(self, fn: Callable[..., _R], *args: Any) -> _R:
        """``fn(*args)`` in the executor, or inline without one."""
        if self.executor is None:
            return fn(*args)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args))

    async def claims(self, record: AnswerRecord) -> list[Claim]:
        claims = await self._cpu(extract_claims, record, self.syntax)
        if self.settings.decompose == "sentence":
            return claims
        decompose: Callable[[str], Awaitable[list[str]]] = self.judge.decompose  # type: ignore[attr-defined]
        out: list[Claim] = []
        for claim in claims:
            try:
                parts = [p.strip() for p in await decompose(claim.text) if p.strip()]
            except JudgeError:
                parts = []
            out.extend(claim.model_copy(update={"text": p}) for p in (parts or [claim.text]))
        return out

    async def score(
        self, record: AnswerRecord, claims: Sequence[Claim] | None = None
    ) -> AnswerScore:
        """Score one answer; ``claims`` overrides extraction (the shuffle self-test uses it)."""
        if self.passages is not None:
            record, _ = await fill_from_store(record, self.passages, hash_key=self.passage_hash_key)
        if self._inline is not None and self._cpu_judge:
            # The CPU judge's answer in a worker thread: the caller's loop only awaits. A
            # cancelled caller leaves the thread to finish (it cannot be interrupted).
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self.executor, _score_in_thread, self._inline, record, claims
            )
        if claims is None:
            claims = await self.claims(record)
        passages = record.passage_map()
        calls = _Calls()
        # A claim whose cited passages all came without text (an ID and a score only) has
        # nothing to be judged against: unjudged, never "wrong", and no judge call.
        textless = [
            bool(c.resolved_ids) and not any(passages.get(p) for p in c.resolved_ids)
            for c in claims
        ]
        judged = [c for c, blind in zip(claims, textless, strict=True) if not blind]
        if isinstance(self.judge, BatchJudge):
            judged_results = await self._batch(self.judge, judged, passages, calls)
        else:
            judged_results = await self._per_claim(judged, passages, calls)
        results = merge_textless(claims, textless, judged_results, record.lookup_failed)
        for claim, result in zip(claims, results, strict=True):
            apply_lookup_failure(result, claim, record.lookup_failed)
            apply_truncation(result, record)
        # After every verdict is final: a pattern explains a verdict, never changes one.
        assign_patterns(results, record, self.syntax.passage_id_keys)
        score = AnswerScore(
            id=record.id,
            service=record.service,
            version=record.version,
            environment=record.environment,
            trace_id=record.trace_id,
            claims=results,
            judge_calls=calls.made,
            judge_calls_cut=sum(r.search_cut for r in results),
            text_source=dict.fromkeys(record.from_store, "store"),
        )
        score._evidence = excerpts(score, passages)  # for the results record
        # for the review record (kilobytes: the passages themselves are not kept)
        score._question, score._answer = record.question, record.answer
        score._passage_chars = {pid: len(passages[pid]) for pid in score._evidence}
        return score

    async def score_many(
        self, records: Iterable[AnswerRecord], *, max_concurrent_answers: int = 16
    ) -> list[AnswerScore]:
        """Score answers concurrently, at most ``max_concurrent_answers`` at once, in order."""
        gate = asyncio.Semaphore(max_concurrent_answers)

        async def one(record: AnswerRecord) -> AnswerScore:
            async with gate:
                return await self.score(record)

        return list(await asyncio.gather(*(one(r) for r in records)))

    async def _ask(self, claim: str, passages: Mapping[str, str], calls: _Calls) -> bool:
        return (await self._verdict(claim, passages, calls)).entailed

    async def _verdict(self, claim: str, passages: Mapping[str, str], calls: _Calls) -> Verdict:
        calls.made += 1
        try:
            return await self.judge.entails(claim, passages)
        except JudgeError as exc:
            raise _Unjudged(f"judge failed: {exc}") from exc

    async def _per_claim(
        self, claims: Sequence[Claim], passages: Mapping[str, str], calls: _Calls
    ) -> list[ClaimResult]:
        """Steps 1, 2 and 4 of every claim, then the support searches within the bound."""
        results = [open_result(c) for c in claims]

        async def first(i: int) -> _Search | None:
            try:
                return await self._judge_claim(claims[i], passages, results[i], calls, i)
            except _Unjudged as exc:
                mark_unjudged(results[i], claims[i], exc.reason)
                return None

        searches = [s for s in await _waves(first, list(range(len(claims)))) if s]
        if not searches:
            return results
        limit = self.settings.max_judge_calls_per_answer
        grants = (
            allot([len(s.others) for s in searches], max(0, limit - calls.made))
            if limit
            else [len(s.others) for s in searches]
        )
        for search, grant in zip(searches, grants, strict=True):
            if grant >= len(search.others):
                search.asked = search.others
            else:
                ranked = await self._cpu(
                    by_overlap, claims[search.index].text, search.others, passages
                )
                search.asked = ranked[:grant]

        async def search_one(search: _Search) -> None:
            claim, result = claims[search.index], results[search.index]
            try:
                checks = await asyncio.gather(
                    *(self._ask(claim.text, {p: passages[p]}, calls) for p in search.asked)
                )
            except _Unjudged as exc:
                mark_unjudged(result, claim, exc.reason)
                return
            found = set(p for p, ok in zip(search.asked, checks, strict=True) if ok)
            result.search_cut = len(search.others) - len(search.asked)
            supporters = [p for p in search.others if p in found]  # in retrieval order
            if not supporters and result.search_cut:
                mark_unjudged(
                    result,
                    claim,
                    f"support search cut: {len(search.asked)} of {len(search.others)} passages "
                    "asked, none entails (max_judge_calls_per_answer)",
                    cause="search_cut",
                )
                result.faithful = True  # the context does entail it (step 2)
                return
            attribute(result, search.cited, passages, supporters, self.settings.overlap_tokens)

        await _waves(search_one, searches)
        return results

    async def _judge_claim(
        self,
        claim: Claim,
        passages: Mapping[str, str],
        result: ClaimResult,
        calls: _Calls,
        index: int,
    ) -> _Search | None:
        """Steps 1, 2 and 4; a claim that needs step 3 comes back as a :class:`_Search`."""
        cited = [c for c in claim.resolved_ids if c in passages]
        if claim.cited and self._citable(claim, cited):
            shown = {c: passages[c] for c in cited}
            check = await self._verdict(claim.text, shown, calls)
            result.reason = check.reason and f"cited: {check.reason}"
            if check.entailed:
                groups = citation_groups(claim, passages)
                irrelevant: list[str] = []
                if self.PRECISION and len(groups) > 1:
                    irrelevant = await self._irrelevant(claim.text, groups, calls)
                mark_correct(result, cited, irrelevant, groups)
                return None
        result.faithful = bool(passages) and await self._ask(claim.text, passages, calls)
        if not needs_search(result, claim):
            return None
        return _Search(index, cited, self._others(cited, passages))

    def _others(self, cited: list[str], passages: Mapping[str, str]) -> list[str]:
        """The passages a failed claim's support is searched in, in retrieval order."""
        # Under `single`, a multi-ID citation fails the policy; its own passages may still support.
        return [p for p in passages if p not in cited or self.settings.policy == "single"]

    # -- the batch path (wire contract v2) ---------------------------------------------------

    async def _batch(
        self,
        judge: BatchJudge,
        claims: Sequence[Claim],
        passages: Mapping[str, str],
        calls: _Calls,
    ) -> list[ClaimResult]:
        """Every claim of one answer in one call per cited-passage set plus one support search."""
        results = [open_result(c) for c in claims]
        valid = [[c for c in claim.resolved_ids if c in passages] for claim in claims]
        sets, still_open = self.cited_sets(claims, passages)  # still_open: the support search's

        async def check(key: tuple[str, ...], members: list[int]) -> list[CitedOutcome]:
            shown = {p: passages[p] for p in key}
            precise = self.PRECISION and len(shown) > 1
            texts = [claims[i].text for i in members]
            calls.made += 1
            return await _outcomes(judge.check_citations(texts, shown, precision=precise), texts)

        checked = await asyncio.gather(*(check(k, m) for k, m in sets.items()))
        for members, outcomes in zip(sets.values(), checked, strict=True):
            for i, cited_out in zip(members, outcomes, strict=True):
                result = results[i]
                if isinstance(cited_out, JudgeError):
                    mark_unjudged(result, claims[i], f"judge failed: {cited_out}")
                    continue
                result.reason = cited_out.reason and f"cited: {cited_out.reason}"
                if not cited_out.entailed:
                    still_open.append(i)
                    continue
                groups = citation_groups(claims[i], passages)
                irrelevant = []
                if self.PRECISION and len(groups) > 1:
                    # The judge weighs passages; a citation is irrelevant when every passage
                    # it named is.
                    weak = set(cited_out.irrelevant(list(dict.fromkeys(valid[i]))))
                    irrelevant = [name for name, pids in groups.items() if weak.issuperset(pids)]
                mark_correct(result, valid[i], irrelevant, groups)
        if not still_open:
            return results
        still_open.sort()
        texts = [claims[i].text for i in still_open]
        if passages:
            calls.made += 1
            found = await _outcomes(judge.find_support(texts, passages), texts)
        else:  # nothing retrieved entails nothing, without asking
            found = [SupportVerdict(supported_by=(), joint=False)] * len(still_open)
        for i, support in zip(still_open, found, strict=True):
            result, claim = results[i], claims[i]
            if isinstance(support, JudgeError):
                mark_unjudged(result, claim, f"judge failed: {support}")
                continue
            result.faithful = support.faithful
            if needs_search(result, claim):  # searched already: the judge said who supports
                others = self._others(valid[i], passages)
                supporters = [p for p in others if p in support.supported_by]
                attribute(result, valid[i], passages, supporters, self.settings.overlap_tokens)
        return results

    def _citable(self, claim: Claim, cited: list[str]) -> bool:
        if self.settings.policy == "single":
            return len(claim.cited_ids) == 1 and bool(cited)
        return bool(cited)

    def citable(self, claim: Claim, passages: Mapping[str, str]) -> list[str] | None:
        """The claim's retrieved cited IDs when the policy lets step 1 check them, else ``None``
        (the claim is cited and cannot be correct: no retrieved ID, or ``single`` with several)."""
        cited = [c for c in claim.resolved_ids if c in passages]
        return cited if self._citable(claim, cited) else None

    def cited_sets(
        self, claims: Sequence[Claim], passages: Mapping[str, str]
    ) -> tuple[dict[tuple[str, ...], list[int]], list[int]]:
        """Step 1's questions as the batch path asks them: the indices of the checkable cited
        claims grouped by the passage set they cite (in retrieval order, one call per set),
        and the indices of the others (uncited, or cited and not checkable), in order. The
        online shuffle probe asks its rotated claims the same way."""
        sets: dict[tuple[str, ...], list[int]] = {}
        rest: list[int] = []
        for i, claim in enumerate(claims):
            valid = self.citable(claim, passages) if claim.cited else None
            if valid is None:
                rest.append(i)
                continue
            sets.setdefault(tuple(p for p in passages if p in valid), []).append(i)
        return sets, rest

    async def _irrelevant(
        self, claim: str, groups: Mapping[str, Mapping[str, str]], calls: _Calls
    ) -> list[str]:
        """ALCE: a cited ID is irrelevant if it alone fails and the other cited IDs still
        entail. A cited ID is the passages it named (several when a metadata ID names chunks)."""
        irrelevant: list[str] = []
        for name, alone in groups.items():
            try:
                if await self._ask(claim, alone, calls):
                    continue
                rest = {
                    p: t
                    for other, shown in groups.items()
                    if other != name
                    for p, t in shown.items()
                }
                if await self._ask(claim, rest, calls):
                    irrelevant.append(name)
            except _Unjudged:
                continue  # precision is a refinement; the claim's verdict stands
        return irrelevant


_O = TypeVar("_O", CitedOutcome, SupportOutcome)


async def _outcomes(call: Awaitable[list[_O]], claims: list[str]) -> list[_O | JudgeError]:
    """A batch call's outcomes, one per claim; a judge that breaks that promise fails them all."""
    try:
        got: list[_O | JudgeError] = list(await call)
    except JudgeError as exc:
        return [exc] * len(claims)
    if len(got) != len(claims):
        bad = JudgeInvalidReply(f"batch judge gave {len(got)} outcomes for {len(claims)} claims")
        return [bad] * len(claims)
    return got


async def _waves(fn: Callable[[_T], Awaitable[_R]], items: Sequence[_T]) -> list[_R]:
    """``fn`` over ``items``, ``_WAVE`` at a time: a 1 MB answer has ~12,000 claims, and
    starting a task for each in one go held the event loop for 1.5 s (in waves: 0.1 s; an
    async judge, measured on 12,222 claims). The judge's own cap on requests in flight is far
    below a wave, so nothing is slower."""
    out: list[_R] = []
    for start in range(0, len(items), _WAVE):
        out.extend(await asyncio.gather(*map(fn, items[start : start + _WAVE])))
    return out


def _score_in_thread(
    scorer: Scorer, record: AnswerRecord, claims: Sequence[Claim] | None
) -> AnswerScore:
    """An executor job: one answer on this thread's own event loop (CPU judges only)."""
    return asyncio.run(scorer.score(record, claims))
