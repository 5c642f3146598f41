"""Per-answer scoring: the citation check, faithfulness, the failure taxonomy, precision.

The judge calls per claim, in the order they are made:

1. the citation check: the cited passages only (policy ``any_of``: their union; ``single``: the
   one cited passage). A pass means ``correct`` *and* faithful, with no further call, because a
   passage that entails the claim is part of the context;
2. for a failed or uncited claim, the concatenated context (faithfulness);
3. for a failed claim the context entails, each other passage alone (who really supports it):
   some → ``misattributed``, none → ``multi_hop``. A failed claim the context does not entail is
   ``unsupported`` without this search, since no single passage can entail what all do not;
4. for a ``correct`` claim citing two or more passages, ALCE's citation precision: each cited ID
   alone, and the others without it when it fails alone.

A judge error anywhere a verdict depends on makes the claim ``unjudged``; nothing is guessed.
Its ``unjudged_cause`` says why (:data:`~citemon.core.records.UnjudgedCause`).

**One answer cannot monopolise the judge.** Step 3 is the only step whose calls grow with the
retrieved passages (1,000 passages: 999 calls per failed claim). ``max_judge_calls_per_answer``
bounds it: steps 1, 2 and 4 of every claim run first (they are needed for any verdict and
bounded by what each claim cites); whatever is left of the bound is shared fairly among the
claims that need a search, and each searches its passages in order of lexical overlap with
the claim (content words in common, then retrieval order), so a cut drops the passages least
likely to support it. What is not asked is counted (``search_cut`` per claim,
``judge_calls_cut`` per answer). A cut claim that found a supporter is ``misattributed`` (true,
with ``supported_by`` possibly incomplete); one that found none is ``unjudged`` with cause
``search_cut``, because ``multi_hop`` would claim that *no* single passage supports it, which
was not checked.

**CPU work runs off the event loop** when the scorer is given an ``executor``. With a judge
that computes its verdict on the CPU (:class:`~citemon.core.judge.CPUJudge`: the lexical and
learned judges) the whole answer is scored in one of the executor's threads, on a private
event loop; with any other judge, sentence splitting (pysbd: seconds for a 1 MB answer) and
ranking passages for a cut search run there. Either way the caller's loop only awaits, so
heartbeats, ``/healthz`` and ``/metrics`` keep answering while a huge answer is scored (per
claim, hopping to a thread for each verdict left the loop stalled for 2 s on 12,000 claims:
the per-claim tasks themselves were the load).

A judge that also offers the batch methods of :class:`~citemon.core.judge.BatchJudge` (wire
contract v2) is asked the same questions in fewer calls, with the same verdicts: step 1 becomes
one call per distinct cited-passage set (carrying every claim citing exactly that set, and step
4's questions for sets of two or more), and steps 2 and 3 become one call per answer over all
retrieved passages for the claims still open (which single passages entail each, and whether all
jointly do). A judge with ``entails`` alone is scored exactly as above.

Why one module (about 600 lines): the steps of scoring one answer (the citation check under the
policy, precision, faithfulness, the failure taxonomy) fill in one claim result together, and the
summary reads exactly what they wrote; apart, each step would need the others' private fields.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

from citemon.core.errors import ConfigError, JudgeError, JudgeInvalidReply
from citemon.core.judge import (
    BatchJudge,
    CitedOutcome,
    CPUJudge,
    Judge,
    SupportOutcome,
    SupportVerdict,
)
from citemon.core.records import (
    CITED_VERDICTS,
    VERDICTS,
    AnswerRecord,
    AnswerScore,
    Claim,
    ClaimResult,
    UnjudgedCause,
    Verdict,
    VerdictName,
)
from citemon.core.stats import ratio, wilson
from citemon.core.text import CitationSyntax, overlap_words
from citemon.engine.claims import extract_claims
from citemon.engine.excerpts import excerpts

if TYPE_CHECKING:
    from citemon.core.calibration import Calibration

__all__ = ["DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER", "Scorer", "ScoringOptions", "Summary", "summarize"]

Policy = Literal["any_of", "single"]
_TOKENS = re.compile(r"\w+")
_R = TypeVar("_R")
_T = TypeVar("_T")
_WAVE: Final = 256  # claims of one answer checked concurrently

DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER: Final = 100
"""``--max-judge-calls-per-answer`` / ``CITEMON_MAX_JUDGE_CALLS_PER_ANSWER``, in judge calls."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ScoringOptions:
    """How claims are checked. ``overlap_tokens``: shared run that marks a chunking artifact."""

    policy: Policy = "any_of"
    decompose: Literal["sentence", "llm"] = "sentence"
    overlap_tokens: int = 12
    syntax: CitationSyntax = field(default_factory=CitationSyntax)
    precision: bool = True
    max_judge_calls_per_answer: int = DEFAULT_MAX_JUDGE_CALLS_PER_ANSWER
    """Judge calls per answer past which the misattribution search is cut (0: no bound)."""


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

    def __init__(
        self,
        judge: Judge,
        options: ScoringOptions | None = None,
        *,
        executor: Executor | None = None,
    ) -> None:
        self.judge = judge
        self.options = options or ScoringOptions()
        self.executor = executor
        """Where CPU-bound work runs (None: inline, on the caller's event loop)."""
        if self.options.decompose == "llm" and not hasattr(judge, "decompose"):
            raise ConfigError("--decompose llm needs a judge that can decompose (the http judge)")
        if self.options.max_judge_calls_per_answer < 0:
            raise ConfigError("--max-judge-calls-per-answer must be 0 (no bound) or more")
        self._cpu_judge = isinstance(judge, CPUJudge)
        self._inline = Scorer(judge, self.options) if executor is not None else None

    async def _cpu(self, fn: Callable[..., _R], *args: Any) -> _R:
        """``fn(*args)`` in the executor, or inline without one."""
        if self.executor is None:
            return fn(*args)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args))

    async def claims(self, record: AnswerRecord) -> list[Claim]:
        claims = await self._cpu(extract_claims, record, self.options.syntax)
        if self.options.decompose == "sentence":
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
        results = _merge_textless(claims, textless, judged_results)
        for result in results:
            _truncation(result, record)
        score = AnswerScore(
            id=record.id,
            service=record.service,
            version=record.version,
            environment=record.environment,
            trace_id=record.trace_id,
            claims=results,
            judge_calls=calls.made,
            judge_calls_cut=sum(r.search_cut for r in results),
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
        results = [
            ClaimResult(
                sentence=c.sentence,
                text=c.text,
                cited_ids=c.cited_ids,
                resolved_ids=c.resolved_ids,
                verdict="uncited",
            )
            for c in claims
        ]

        async def first(i: int) -> _Search | None:
            try:
                return await self._judge_claim(claims[i], passages, results[i], calls, i)
            except _Unjudged as exc:
                _unjudged(results[i], claims[i], exc.reason)
                return None

        searches = [s for s in await _waves(first, list(range(len(claims)))) if s]
        if not searches:
            return results
        limit = self.options.max_judge_calls_per_answer
        grants = (
            _allot([len(s.others) for s in searches], max(0, limit - calls.made))
            if limit
            else [len(s.others) for s in searches]
        )
        for search, grant in zip(searches, grants, strict=True):
            if grant >= len(search.others):
                search.asked = search.others
            else:
                ranked = await self._cpu(
                    _by_overlap, claims[search.index].text, search.others, passages
                )
                search.asked = ranked[:grant]

        async def search_one(search: _Search) -> None:
            claim, result = claims[search.index], results[search.index]
            try:
                checks = await asyncio.gather(
                    *(self._ask(claim.text, {p: passages[p]}, calls) for p in search.asked)
                )
            except _Unjudged as exc:
                _unjudged(result, claim, exc.reason)
                return
            found = set(p for p, ok in zip(search.asked, checks, strict=True) if ok)
            result.search_cut = len(search.others) - len(search.asked)
            supporters = [p for p in search.others if p in found]  # in retrieval order
            if not supporters and result.search_cut:
                _unjudged(
                    result,
                    claim,
                    f"support search cut: {len(search.asked)} of {len(search.others)} passages "
                    "asked, none entails (max_judge_calls_per_answer)",
                    cause="search_cut",
                )
                result.faithful = True  # the context does entail it (step 2)
                return
            self._attribute(result, search.cited, passages, supporters)

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
                groups = _groups(claim, passages)
                irrelevant: list[str] = []
                if self.options.precision and len(groups) > 1:
                    irrelevant = await self._irrelevant(claim.text, groups, calls)
                _correct(result, cited, irrelevant, groups)
                return None
        result.faithful = bool(passages) and await self._ask(claim.text, passages, calls)
        if not _needs_search(result, claim):
            return None
        return _Search(index, cited, self._others(cited, passages))

    def _others(self, cited: list[str], passages: Mapping[str, str]) -> list[str]:
        """The passages a failed claim's support is searched in, in retrieval order."""
        # Under `single`, a multi-ID citation fails the policy; its own passages may still support.
        return [p for p in passages if p not in cited or self.options.policy == "single"]

    def _attribute(
        self,
        result: ClaimResult,
        cited: list[str],
        passages: Mapping[str, str],
        supported_by: list[str],
    ) -> None:
        """A faithful claim whose citation failed: ``misattributed`` or ``multi_hop``."""
        result.supported_by = supported_by
        if not supported_by:
            result.verdict = "multi_hop"
            return
        result.verdict = "misattributed"
        result.overlap = any(
            _share_run(passages[s], passages[c], self.options.overlap_tokens)
            for s in supported_by
            for c in cited
            if s != c
        )

    # -- the batch path (wire contract v2) ---------------------------------------------------

    async def _batch(
        self,
        judge: BatchJudge,
        claims: Sequence[Claim],
        passages: Mapping[str, str],
        calls: _Calls,
    ) -> list[ClaimResult]:
        """Every claim of one answer in one call per cited-passage set plus one support search."""
        results = [
            ClaimResult(
                sentence=c.sentence,
                text=c.text,
                cited_ids=c.cited_ids,
                resolved_ids=c.resolved_ids,
                verdict="uncited",
            )
            for c in claims
        ]
        valid = [[c for c in claim.resolved_ids if c in passages] for claim in claims]
        sets, still_open = self.cited_sets(claims, passages)  # still_open: the support search's

        async def check(key: tuple[str, ...], members: list[int]) -> list[CitedOutcome]:
            shown = {p: passages[p] for p in key}
            precise = self.options.precision and len(shown) > 1
            texts = [claims[i].text for i in members]
            calls.made += 1
            return await _outcomes(judge.check_citations(texts, shown, precision=precise), texts)

        checked = await asyncio.gather(*(check(k, m) for k, m in sets.items()))
        for members, outcomes in zip(sets.values(), checked, strict=True):
            for i, cited_out in zip(members, outcomes, strict=True):
                result = results[i]
                if isinstance(cited_out, JudgeError):
                    _unjudged(result, claims[i], f"judge failed: {cited_out}")
                    continue
                result.reason = cited_out.reason and f"cited: {cited_out.reason}"
                if not cited_out.entailed:
                    still_open.append(i)
                    continue
                groups = _groups(claims[i], passages)
                irrelevant = []
                if self.options.precision and len(groups) > 1:
                    # The judge weighs passages; a citation is irrelevant when every passage
                    # it named is.
                    weak = set(cited_out.irrelevant(list(dict.fromkeys(valid[i]))))
                    irrelevant = [name for name, pids in groups.items() if weak.issuperset(pids)]
                _correct(result, valid[i], irrelevant, groups)
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
                _unjudged(result, claim, f"judge failed: {support}")
                continue
            result.faithful = support.faithful
            if _needs_search(result, claim):  # searched already: the judge said who supports
                others = self._others(valid[i], passages)
                supporters = [p for p in others if p in support.supported_by]
                self._attribute(result, valid[i], passages, supporters)
        return results

    def _citable(self, claim: Claim, cited: list[str]) -> bool:
        if self.options.policy == "single":
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


def _correct(
    result: ClaimResult,
    cited: list[str],
    irrelevant: list[str],
    groups: Mapping[str, Mapping[str, str]],
) -> None:
    """Step 1 passed: the cited passages entail the claim. ``irrelevant``: the citations ALCE's
    precision finds irrelevant (empty when precision was not asked); ``groups``: each citation →
    the passages it named, so that dropping a citation drops all of its passages."""
    result.verdict, result.faithful = "correct", True
    result.irrelevant_ids = irrelevant
    result.supported_by = _kept(cited, groups, irrelevant) if irrelevant else list(cited)


def _needs_search(result: ClaimResult, claim: Claim) -> bool:
    """Step 2's verdict, once ``result.faithful`` is known, for a claim whose citation check
    failed or that cites nothing: ``uncited`` stays, ``dangling`` (cites an ID not retrieved),
    ``unsupported`` (the context does not entail it); True when it is faithful and cited, so
    step 3 (who supports it: ``misattributed`` or ``multi_hop``) decides. Both paths, per claim
    and batched, decide through here."""
    if not claim.cited:
        return False
    if claim.dangling_ids:
        result.verdict = "dangling"
        result.reason = f"cites IDs not retrieved: {', '.join(claim.dangling_ids)}"
        return False
    if not result.faithful:
        result.verdict = "unsupported"
        return False
    return True


def _unjudged(
    result: ClaimResult, claim: Claim, reason: str, cause: UnjudgedCause = "judge_failure"
) -> None:
    result.verdict = "unjudged" if claim.cited else "uncited"
    result.faithful = None
    result.supported_by = []
    result.reason = reason
    result.unjudged_cause = cause


def _groups(claim: Claim, passages: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Each retrieved cited ID → the passages it named (``Claim.resolution``; a claim made
    without one counts each resolved passage as its own citation)."""
    resolution = claim.resolution or {p: [p] for p in claim.resolved_ids}
    groups = {
        name: {p: passages[p] for p in pids if p in passages} for name, pids in resolution.items()
    }
    return {name: shown for name, shown in groups.items() if shown}


def _kept(
    cited: Sequence[str], groups: Mapping[str, Mapping[str, str]], dropped: list[str]
) -> list[str]:
    """The cited passages that some relevant citation named."""
    keep = {p for name, shown in groups.items() if name not in dropped for p in shown}
    return [p for p in cited if p in keep]


def _merge_textless(
    claims: Sequence[Claim], textless: Sequence[bool], judged: Sequence[ClaimResult]
) -> list[ClaimResult]:
    """The judged claims' results with ``unjudged`` (``no_passage_text``) ones in between."""
    rest = iter(judged)
    out: list[ClaimResult] = []
    for claim, blind in zip(claims, textless, strict=True):
        if not blind:
            out.append(next(rest))
            continue
        result = ClaimResult(
            sentence=claim.sentence,
            text=claim.text,
            cited_ids=claim.cited_ids,
            resolved_ids=claim.resolved_ids,
            verdict="uncited",
        )
        _unjudged(
            result,
            claim,
            f"no text for the cited passages: {', '.join(claim.resolved_ids)}",
            cause="no_passage_text",
        )
        out.append(result)
    return out


def _truncation(result: ClaimResult, record: AnswerRecord) -> None:
    if result.unjudged_cause == "no_passage_text":
        return
    if not record.truncated or result.unjudged_cause == "judge_failure":
        # A judge failure stays one: it is retried, and it is evidence about the judge that
        # the truncation must not turn into a clean score.
        return
    if result.verdict not in ("correct", "uncited"):
        # The monitor never saw the whole answer: a failure may be the truncation's.
        result.verdict, result.reason = "unjudged", "input truncated by the producer"
        result.unjudged_cause = "truncated"
    if result.faithful is False:
        result.faithful = None


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


def _allot(needs: Sequence[int], budget: int) -> list[int]:
    """Share ``budget`` among ``needs`` fairly: the smallest needs are met first, the rest get
    equal shares (max-min fairness); deterministic."""
    grants = [0] * len(needs)
    left = budget
    order = sorted(range(len(needs)), key=lambda i: needs[i])
    for k, i in enumerate(order):
        grants[i] = min(needs[i], left // (len(needs) - k))
        left -= grants[i]
    return grants


def _by_overlap(claim: str, candidates: Sequence[str], passages: Mapping[str, str]) -> list[str]:
    """``candidates`` most likely first: content words shared with the claim, then retrieval
    order (``sorted`` is stable)."""
    words = overlap_words(claim)
    return sorted(candidates, key=lambda p: -len(words & overlap_words(passages[p])))


def _share_run(a: str, b: str, n: int) -> bool:
    """Whether ``a`` and ``b`` share ``n`` or more consecutive word tokens."""
    ta, tb = _TOKENS.findall(a.lower()), _TOKENS.findall(b.lower())
    if len(ta) < n or len(tb) < n:
        return False
    grams = {tuple(tb[i : i + n]) for i in range(len(tb) - n + 1)}
    return any(tuple(ta[i : i + n]) in grams for i in range(len(ta) - n + 1))


@dataclass(slots=True)
class Summary:
    """Totals over scored answers; ratios exclude ``unjudged`` everywhere."""

    answers: int = 0
    claims: int = 0
    verdicts: dict[VerdictName, int] = field(default_factory=lambda: dict.fromkeys(VERDICTS, 0))
    faithful: int = 0
    faithfulness_judged: int = 0
    cited_ids: int = 0
    correct_citations: int = 0
    irrelevant_citations: int = 0
    overlap_misattributions: int = 0

    def add(self, score: AnswerScore) -> None:
        self.answers += 1
        for c in score.claims:
            self.claims += 1
            self.verdicts[c.verdict] += 1
            if c.faithful is not None:
                self.faithfulness_judged += 1
                self.faithful += c.faithful
            if c.verdict in CITED_VERDICTS:
                self.cited_ids += len(c.cited_ids)
            if c.verdict == "correct":
                self.correct_citations += len(c.cited_ids)
                self.irrelevant_citations += len(c.irrelevant_ids)
            self.overlap_misattributions += c.verdict == "misattributed" and c.overlap

    @property
    def cited_claims(self) -> int:
        return sum(n for v, n in self.verdicts.items() if v in CITED_VERDICTS)

    def as_dict(
        self, policy: Policy = "any_of", calibration: Calibration | None = None
    ) -> dict[str, Any]:
        """The ``summary`` object of the JSON output; with a calibration, corrected accuracy too."""
        cited, correct = self.cited_claims, self.verdicts["correct"]
        judged = cited + self.verdicts["uncited"]
        precise = self.correct_citations - self.irrelevant_citations
        return {
            "answers": self.answers,
            "claims": self.claims,
            "cited_claims": cited,
            "citation_accuracy": _round(ratio(correct, cited)),
            "citation_accuracy_ci95": _interval(correct, cited),
            "citation_coverage": _round(ratio(cited, judged)),
            "citation_coverage_ci95": _interval(cited, judged),
            "faithfulness": _round(ratio(self.faithful, self.faithfulness_judged)),
            "ids_per_claim": _round(ratio(self.cited_ids, cited)),
            "citation_precision": _round(ratio(precise, self.correct_citations)),
            "policy": policy,
            "overlap_misattributions": self.overlap_misattributions,
            "verdicts": dict(self.verdicts),
        } | (self._corrected(calibration) if calibration is not None else {})

    def _corrected(self, calibration: Calibration) -> dict[str, Any]:
        from citemon.core.calibration import corrected_accuracy

        got = corrected_accuracy(self.verdicts["correct"], self.cited_claims, calibration)
        if got is None:
            return {"citation_accuracy_corrected": None, "citation_accuracy_corrected_ci95": None}
        point, (lo, hi) = got
        return {
            "citation_accuracy_corrected": round(point, 4),
            "citation_accuracy_corrected_ci95": [round(lo, 2), round(hi, 2)],
        }


def summarize(scores: Iterable[AnswerScore]) -> Summary:
    summary = Summary()
    for score in scores:
        summary.add(score)
    return summary


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _interval(successes: int, n: int) -> list[float] | None:
    bounds = wilson(successes, n)
    return None if bounds is None else [round(bounds[0], 2), round(bounds[1], 2)]
