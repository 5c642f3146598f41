"""The verdict decision tree: how one claim's :class:`~citemon._core.records.ClaimResult` is
filled in from the judge's answers.

Both ways of asking (:mod:`citemon._engine.scoring`'s per-claim path, one ``entails`` call per
question, and its batched path, wire contract v2) decide through these functions, so the two
give the same verdicts by construction: a result opens as ``uncited``; step 1's pass makes it
``correct`` (:func:`mark_correct`); otherwise :func:`needs_search` settles ``uncited``,
``dangling`` and ``unsupported`` and :func:`attribute` the rest (``misattributed`` or
``multi_hop``); :func:`mark_unjudged` records why no verdict could be given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final

from citemon._core.records import AnswerRecord, Claim, ClaimResult, UnjudgedCause

__all__ = [
    "apply_lookup_failure",
    "apply_truncation",
    "attribute",
    "citation_groups",
    "mark_correct",
    "mark_unjudged",
    "merge_textless",
    "needs_search",
    "open_result",
]

_TOKENS: Final = re.compile(r"\w+")


def open_result(claim: Claim) -> ClaimResult:
    """A claim's result before any judge call: ``uncited`` until a step decides."""
    return ClaimResult(
        sentence=claim.sentence,
        text=claim.text,
        cited_ids=claim.cited_ids,
        resolved_ids=claim.resolved_ids,
        verdict="uncited",
        quote_mismatch=claim.quote_mismatch,
    )


def mark_correct(
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


def needs_search(result: ClaimResult, claim: Claim) -> bool:
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


def attribute(
    result: ClaimResult,
    cited: Sequence[str],
    passages: Mapping[str, str],
    supported_by: list[str],
    overlap_tokens: int,
) -> None:
    """A faithful claim whose citation failed: ``misattributed`` (some single passage entails
    it; ``overlap`` when a supporter shares ``overlap_tokens`` words in a row with a cited
    passage, a chunking artifact) or ``multi_hop`` (none alone does)."""
    result.supported_by = supported_by
    if not supported_by:
        result.verdict = "multi_hop"
        return
    result.verdict = "misattributed"
    result.overlap = any(
        _share_run(passages[s], passages[c], overlap_tokens)
        for s in supported_by
        for c in cited
        if s != c
    )


def mark_unjudged(
    result: ClaimResult, claim: Claim, reason: str, cause: UnjudgedCause = "judge_failure"
) -> None:
    result.verdict = "unjudged" if claim.cited else "uncited"
    result.faithful = None
    result.supported_by = []
    result.reason = reason
    result.unjudged_cause = cause


def citation_groups(claim: Claim, passages: Mapping[str, str]) -> dict[str, dict[str, str]]:
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


def merge_textless(
    claims: Sequence[Claim],
    textless: Sequence[bool],
    judged: Sequence[ClaimResult],
    lookup_failed: frozenset[str] = frozenset(),
) -> list[ClaimResult]:
    """The judged claims' results with ``unjudged`` ones in between: ``no_passage_text``, or
    ``passage_lookup_failed`` when the passage store failed for one of the cited passages."""
    rest = iter(judged)
    out: list[ClaimResult] = []
    for claim, blind in zip(claims, textless, strict=True):
        if not blind:
            out.append(next(rest))
            continue
        result = open_result(claim)
        failed = [p for p in claim.resolved_ids if p in lookup_failed]
        if failed:
            mark_unjudged(
                result,
                claim,
                f"passage store lookup failed for: {', '.join(failed)}",
                cause="passage_lookup_failed",
            )
        else:
            mark_unjudged(
                result,
                claim,
                f"no text for the cited passages: {', '.join(claim.resolved_ids)}",
                cause="no_passage_text",
            )
        out.append(result)
    return out


def apply_lookup_failure(result: ClaimResult, claim: Claim, failed: frozenset[str]) -> None:
    """A failed verdict reached while the passage store failed for some of the answer's
    passages may be the missing text's doing: ``unjudged`` (``passage_lookup_failed``), never
    wrong. A ``correct`` verdict stands (the cited text it read entails the claim), and so do
    ``dangling`` and a faithful uncited claim."""
    if not failed or result.unjudged_cause is not None:
        return
    if result.verdict in ("misattributed", "multi_hop", "unsupported") or (
        result.verdict == "uncited" and result.faithful is False
    ):
        mark_unjudged(
            result,
            claim,
            f"passage store lookup failed for: {', '.join(sorted(failed))}",
            cause="passage_lookup_failed",
        )


def apply_truncation(result: ClaimResult, record: AnswerRecord) -> None:
    if result.unjudged_cause in ("no_passage_text", "passage_lookup_failed"):
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


def _share_run(a: str, b: str, n: int) -> bool:
    """Whether ``a`` and ``b`` share ``n`` or more consecutive word tokens."""
    ta, tb = _TOKENS.findall(a.lower()), _TOKENS.findall(b.lower())
    if len(ta) < n or len(tb) < n:
        return False
    grams = {tuple(tb[i : i + n]) for i in range(len(tb) - n + 1)}
    return any(tuple(ta[i : i + n]) in grams for i in range(len(ta) - n + 1))
