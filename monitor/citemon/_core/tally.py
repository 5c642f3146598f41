"""The counts behind citemon's ratios, and the ratios: one :class:`Tally` that every part
reporting citation accuracy, coverage, IDs per claim, faithfulness, citation precision or the
multi-hop ceiling counts into and asks (the way :class:`collections.Counter` carries its own
arithmetic).

A ratio with nothing to divide is ``None``, never a fake 0 or 1. ``unjudged`` claims are in
no denominator: a judge failure moves no ratio. Tallies add up (``a + b``, ``sum(tallies,
Tally())``), so a window, a version or a whole file is the sum of its answers' tallies.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields

from citemon._core.records import CITED_VERDICTS, AnswerScore, ClaimResult
from citemon._core.stats import ratio, wilson

__all__ = ["Tally"]


@dataclass(slots=True)
class Tally:
    """Claim counts and the ratios made of them.

    ``cited``: judged claims carrying a citation (:data:`~citemon._core.records.CITED_VERDICTS`),
    of which ``correct`` and ``multi_hop``; ``uncited``: judged claims without one. ``cited_ids``:
    IDs cited by the cited claims; ``correct_citations`` / ``irrelevant_citations``: IDs cited by
    ``correct`` claims, and those of them ALCE's rule finds irrelevant; ``overlap``:
    misattributed claims whose supporting passage overlaps a cited one.

    Faithfulness is counted two ways, because two outputs define it differently (both kept as
    they were when the tally took their arithmetic over): ``faithful`` counts the *judged*
    claims the concatenated context entails (the ``citemon_faithful_claims_total`` counter, over
    :attr:`judged`), ``faithful_known`` of ``faithfulness_known`` the claims whose faithfulness
    is known at all, an ``unjudged`` one included (the ``citemon score`` summary and the
    evaluation events). They differ only on claims of truncated answers and on uncited claims
    whose faithfulness call failed.
    """

    cited: int = 0
    correct: int = 0
    multi_hop: int = 0
    uncited: int = 0
    cited_ids: int = 0
    correct_citations: int = 0
    irrelevant_citations: int = 0
    overlap: int = 0
    faithful: int = 0
    faithfulness_known: int = 0
    faithful_known: int = 0

    # -- counting ----------------------------------------------------------------------------

    @classmethod
    def of(cls, claims: Iterable[ClaimResult]) -> Tally:
        """The tally of some claims (an answer's: ``Tally.of(score.claims)``)."""
        tally = cls()
        for claim in claims:
            tally.add(claim)
        return tally

    @classmethod
    def of_scores(cls, scores: Iterable[AnswerScore]) -> Tally:
        tally = cls()
        for score in scores:
            for claim in score.claims:
                tally.add(claim)
        return tally

    def add(self, claim: ClaimResult) -> None:
        """Count one claim's verdict, faithfulness and citations."""
        self.add_verdict(claim.verdict)
        if claim.faithful is not None:
            self.faithfulness_known += 1
            self.faithful_known += claim.faithful
        if claim.verdict == "unjudged":
            return
        self.faithful += claim.faithful is True
        if claim.verdict in CITED_VERDICTS:
            self.cited_ids += len(claim.cited_ids)
        if claim.verdict == "correct":
            self.correct_citations += len(claim.cited_ids)
            self.irrelevant_citations += len(claim.irrelevant_ids)
        self.overlap += claim.verdict == "misattributed" and claim.overlap

    def add_verdict(self, verdict: str, n: int = 1) -> None:
        """Count ``n`` claims of one verdict, knowing nothing else of them (a review record's
        claims, or claim counters read back from Prometheus)."""
        if verdict == "uncited":
            self.uncited += n
        elif verdict in CITED_VERDICTS:
            self.cited += n
            self.correct += n if verdict == "correct" else 0
            self.multi_hop += n if verdict == "multi_hop" else 0

    def __add__(self, other: Tally) -> Tally:
        if not isinstance(other, Tally):
            return NotImplemented
        return Tally(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __iadd__(self, other: Tally) -> Tally:
        if not isinstance(other, Tally):
            return NotImplemented
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    # -- the ratios --------------------------------------------------------------------------

    @property
    def judged(self) -> int:
        """Judged claims, cited or not: the denominator of coverage."""
        return self.cited + self.uncited

    @property
    def citation_accuracy(self) -> float | None:
        """Correct claims / cited claims."""
        return ratio(self.correct, self.cited)

    @property
    def citation_accuracy_ci95(self) -> tuple[float, float] | None:
        """The Wilson 95% interval of :attr:`citation_accuracy`."""
        return wilson(self.correct, self.cited)

    @property
    def citation_coverage(self) -> float | None:
        """Cited claims / judged claims."""
        return ratio(self.cited, self.judged)

    @property
    def citation_coverage_ci95(self) -> tuple[float, float] | None:
        return wilson(self.cited, self.judged)

    @property
    def ids_per_claim(self) -> float | None:
        """Cited IDs / cited claims (at least 1 where defined: a cited claim cites an ID)."""
        return ratio(self.cited_ids, self.cited)

    @property
    def faithfulness(self) -> float | None:
        """Faithful claims / claims whose faithfulness is known (the score summary's)."""
        return ratio(self.faithful_known, self.faithfulness_known)

    @property
    def judged_faithfulness(self) -> float | None:
        """Faithful judged claims / judged claims (the ``citemon_faithfulness`` gauge's)."""
        return ratio(self.faithful, self.judged)

    @property
    def citation_precision(self) -> float | None:
        """Relevant IDs / IDs cited by correct claims (ALCE's citation precision)."""
        relevant = self.correct_citations - self.irrelevant_citations
        return ratio(relevant, self.correct_citations)

    def per_cited(self, n: int) -> float | None:
        """``n`` claims of some kind (a misattribution pattern's, say) per cited claim."""
        return ratio(n, self.cited)

    def per_cited_ci95(self, n: int) -> tuple[float, float] | None:
        """The Wilson 95% interval of :meth:`per_cited`."""
        return wilson(n, self.cited)

    @property
    def multi_hop_ceiling(self) -> float | None:
        """1 − multi_hop / cited claims: the citation accuracy no single citation per claim
        can exceed on this traffic (a claim two passages support only jointly has no correct
        one)."""
        share = ratio(self.multi_hop, self.cited)
        return None if share is None else 1.0 - share
