"""The judge protocols: the only things the scorer asks of a model.

:class:`Judge` answers one claim at a time; :class:`BatchJudge` is the optional batch capability
(wire contract v2's two questions), with its per-claim outcome types. They live in the bottom
layer so that the scorer needs no judge module; :mod:`citemon.judges` re-exports them for judge
authors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from citemon._core.errors import JudgeError
from citemon._core.records import Verdict

__all__ = [
    "BatchJudge",
    "CPUJudge",
    "CitedOutcome",
    "CitedVerdict",
    "Judge",
    "JudgeObserver",
    "SupportOutcome",
    "SupportVerdict",
]


@runtime_checkable
class Judge(Protocol):
    """Decides whether ``passages`` (ID → text) entail ``claim``.

    The scorer shows a judge only the passages under test: for a citation check, the cited ones.
    A judge raises :class:`citemon._core.errors.JudgeError` when it cannot answer; the scorer turns
    that into ``unjudged``, never into a verdict.
    """

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict: ...


@runtime_checkable
class CPUJudge(Protocol):
    """A judge whose verdict is pure computation (no I/O): the lexical and learned judges.

    ``check`` is the same verdict as ``entails``, synchronously. The monitor's scorer scores a
    CPU judge's answers in worker threads (each on a private event loop), so the judge must
    be thread-safe and its ``entails`` must not touch another event loop.
    """

    def check(self, claim: str, passages: Mapping[str, str]) -> Verdict: ...

    async def entails(self, claim: str, passages: Mapping[str, str]) -> Verdict: ...


@runtime_checkable
class JudgeObserver(Protocol):
    """What a judge's transport tells of each request it makes, and its cache of each lookup,
    to every observer it was handed (the judge metrics; in ``citemon run`` also the judge gate,
    which needs only the successes).

    Each event does nothing here: an observer that needs only some of them subclasses this
    class and overrides those (the others stay no-ops), so every observer has every method and
    the transport calls each one directly.
    """

    def request_done(self, outcome: str, seconds: float) -> None:
        """One request finished (after it left the in-flight count), with its latency;
        ``outcome`` is one of ``ok``, ``error``, ``timeout``, ``rate_limited``, ``invalid``."""
        return None

    def inflight(self, delta: int) -> None:
        """+1 when a request starts, -1 when it ends."""
        return None

    def cache(self, hit: bool) -> None:
        """One cache lookup (joining an identical request in flight is a hit)."""
        return None

    def invalid_reply(self, cause: str) -> None:
        """One reply was invalid (:data:`citemon._core.errors.INVALID_REPLY_CAUSES`); its
        request also ends with outcome ``invalid``."""
        return None


# ---------------------------------------------------------------------------------------------
# The batch capability (wire contract v2)


@dataclass(frozen=True, kw_only=True, slots=True)
class CitedVerdict:
    """Whether a citation set entails one claim (and, if asked, which of its passages matter).

    ``supported_by`` and ``dispensable`` are set only when precision was asked and the claim is
    entailed; they are passage IDs of the set, in the set's order.
    """

    entailed: bool
    reason: str | None = None
    confidence: float | None = None
    supported_by: tuple[str, ...] | None = None
    dispensable: tuple[str, ...] | None = None

    def irrelevant(self, cited: Sequence[str]) -> list[str]:
        """ALCE: cited IDs that fail alone while the remaining ones still entail the claim."""
        if not self.entailed or self.supported_by is None or self.dispensable is None:
            return []
        return [c for c in cited if c not in self.supported_by and c in self.dispensable]


@dataclass(frozen=True, kw_only=True, slots=True)
class SupportVerdict:
    """Which single retrieved passages entail a claim, and whether all of them jointly do."""

    supported_by: tuple[str, ...]
    joint: bool
    reason: str | None = None

    @property
    def faithful(self) -> bool:
        """Entailed by the context: jointly, or by some passage alone (which implies jointly)."""
        return self.joint or bool(self.supported_by)


CitedOutcome: TypeAlias = CitedVerdict | JudgeError
"""A claim's citation-check verdict, or the error that left it unjudged."""

SupportOutcome: TypeAlias = SupportVerdict | JudgeError
"""A claim's support-search verdict, or the error that left it unjudged."""


@runtime_checkable
class BatchJudge(Protocol):
    """A judge that answers wire contract v2's two questions, asked once per answer instead of
    once per claim and passage (the scorer uses them whenever a judge has them):

    * :meth:`check_citations`: one call per distinct cited-passage set, carrying every claim
      that cites exactly that set; the judge still sees only those passages. With ``precision``
      (two or more passages) each entailed claim also says which passages entail it alone
      (``supported_by``) and which could be left out with the rest still entailing it
      (``dispensable``): ALCE's precision needs nothing more.
    * :meth:`find_support`: one call per answer, all retrieved passages, for the claims that
      failed their citation check or cite nothing: which single passages entail each claim
      (``supported_by``) and whether all of them jointly do (``joint``).

    The fields mean exactly what these ``entails`` calls would answer::

        check_citations  entailed     = entails(claim, shown)
                         supported_by = [p for p in shown if entails(claim, {p})]
                         dispensable  = [p for p in shown if entails(claim, shown - {p})]
        find_support     supported_by = [p for p in passages if entails(claim, {p})]
                         joint        = entails(claim, passages)

    Both return one outcome per claim, aligned with ``claims`` (which may repeat a text): a
    verdict, or the :class:`~citemon._core.errors.JudgeError` that left that claim without one
    (the scorer makes it ``unjudged``); a judge never raises for the whole batch when some
    claims could be judged. ``passages`` (ID → text) are shown in the order given.
    """

    async def check_citations(
        self, claims: Sequence[str], passages: Mapping[str, str], *, precision: bool
    ) -> list[CitedOutcome]: ...

    async def find_support(
        self, claims: Sequence[str], passages: Mapping[str, str]
    ) -> list[SupportOutcome]: ...
