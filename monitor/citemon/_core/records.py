"""The data citemon passes around: answers in, verdicts out.

Everything here is a pydantic model so that the JSONL input of ``citemon score``, the records the
span decoder builds and the JSON the scorer writes share one validated shape (docs/design.md,
"Input records" and "Score output").
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

__all__ = [
    "CITED_VERDICTS",
    "PATTERNS",
    "UNJUDGED_CAUSES",
    "VERDICTS",
    "AnswerRecord",
    "AnswerScore",
    "Claim",
    "ClaimResult",
    "MisattributionPattern",
    "NativeCitation",
    "Passage",
    "UnjudgedCause",
    "Verdict",
    "VerdictName",
]

VerdictName = Literal[
    "correct", "misattributed", "multi_hop", "unsupported", "dangling", "unjudged", "uncited"
]
"""A claim's citation verdict; mutually exclusive (docs/design.md, "Verdicts")."""

VERDICTS: tuple[VerdictName, ...] = (
    "correct",
    "misattributed",
    "multi_hop",
    "unsupported",
    "dangling",
    "unjudged",
    "uncited",
)

CITED_VERDICTS: tuple[VerdictName, ...] = (
    "correct",
    "misattributed",
    "multi_hop",
    "unsupported",
    "dangling",
)
"""Verdicts of *judged* claims that carry a citation: the denominator of citation accuracy.

``unjudged`` is excluded from every ratio and ``uncited`` has no citation. Defined
here once; the scorer's summary, the metrics and ``citemon compare`` all count with it.
"""

MisattributionPattern = Literal[
    "off_by_one", "first_retrieved", "previous_citation", "same_document", "other"
]
"""How a ``misattributed`` claim's citation went wrong (``ClaimResult.pattern``); the rules and
their chance rates are :mod:`citemon._engine.patterns`' (docs/why-citations-fail.md)."""

PATTERNS: tuple[MisattributionPattern, ...] = (
    "off_by_one",
    "first_retrieved",
    "previous_citation",
    "same_document",
    "other",
)
"""The patterns in the order they are tried: a claim gets the first that holds."""

UnjudgedCause = Literal[
    "judge_failure", "truncated", "search_cut", "no_passage_text", "passage_lookup_failed"
]
"""Why a claim has no verdict (``ClaimResult.unjudged_cause``; docs/design.md, "Verdicts").

``judge_failure``: a judge request the verdict depends on failed (the only cause that is
evidence about the judge, and the only one worth retrying); ``truncated``: the producer marked
the answer truncated, so a failure may be the truncation's; ``search_cut``: the claim's citation
failed and its support search was cut by ``max_judge_calls_per_answer`` before any passage was
found to support it, so neither ``misattributed`` nor ``multi_hop`` can be said;
``no_passage_text``: every passage the claim cites came with an ID but no text (the GenAI
conventions' typed documents), and no passage store (``--passage-store``) had it, so there is
nothing to judge it against; ``passage_lookup_failed``: the passage store that should have given
the cited passages' text failed after its retries (a fault of the store, not of the answer).
"""

UNJUDGED_CAUSES: tuple[UnjudgedCause, ...] = (
    "judge_failure",
    "truncated",
    "search_cut",
    "no_passage_text",
    "passage_lookup_failed",
)


class Passage(BaseModel):
    """One retrieved passage, as the RAG service showed it to its model."""

    model_config = ConfigDict(extra="ignore")

    id: str
    text: str = ""
    source: str | None = None
    score: float | None = None
    metadata: dict[str, Any] | None = None

    @field_validator("id", mode="before")
    @classmethod
    def _id_as_text(cls, value: Any) -> Any:
        # Numeric IDs are common in exported data (`"id": 3`); IDs are compared as text.
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class NativeCitation(BaseModel):
    """A citation the provider returned as structure, not as a marker in the answer's text
    (Anthropic's citations, OpenAI's annotations, Cohere's citations, Gemini's grounding
    supports: docs/dialects.md, "Native citations").

    ``start``/``end`` are character offsets into the answer; ``start == end`` is an insertion
    point (OpenAI's ``file_citation`` ``index``): the citation belongs to the sentence that ends
    there. ``ids`` are the passages it names (:attr:`Passage.id`); ``quote`` is the passage text
    the provider says it cites (Anthropic's ``cited_text``), checked without a judge.
    """

    model_config = ConfigDict(extra="ignore")

    start: int = Field(ge=0)
    end: int = Field(ge=0)
    ids: list[str]
    quote: str | None = None

    @model_validator(mode="after")
    def _ordered(self) -> NativeCitation:
        if self.end < self.start:
            raise ValueError(f"citation ends ({self.end}) before it starts ({self.start})")
        return self


class AnswerRecord(BaseModel):
    """One answer of a RAG service: the unit citemon scores.

    Only ``answer`` and ``passages`` are required. ``truncated`` is set when the producer had to
    drop passages or text (span limits, size caps): such an answer is scored ``unjudged`` rather
    than blamed for a citation the monitor never saw.
    """

    model_config = ConfigDict(extra="ignore")

    id: str | None = None
    question: str = ""
    answer: str
    passages: list[Passage]
    service: str | None = None
    version: str | None = None
    environment: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    truncated: bool = False
    labels: list[dict[str, Any]] | None = None
    citations: list[NativeCitation] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    """The provider's own citations (:class:`NativeCitation`); when set, claims carry these
    instead of markers (an empty list: the answer cites nothing). Left out of the JSON when
    unset."""
    _origin: dict[str, str] = PrivateAttr(default_factory=dict)
    """Where a record read from a trace came from (``passages``, ``answer``: which spans, which
    dialect), for ``citemon score --explain-input``; never serialised."""
    _from_store: dict[str, str] = PrivateAttr(default_factory=dict)
    """Passage ID → ``"store"`` for each passage whose text the passage store gave
    (:mod:`citemon._engine.passage_text`); never serialised."""
    _lookup_failed: frozenset[str] = PrivateAttr(default_factory=frozenset)
    """IDs whose text the passage store was asked for and failed to give (after retries)."""
    _asked_store: frozenset[str] = PrivateAttr(default_factory=frozenset)
    """IDs already asked of the passage store for this record (asked once, whatever came)."""

    @property
    def origin(self) -> dict[str, str]:
        return self._origin

    @property
    def from_store(self) -> dict[str, str]:
        return self._from_store

    @property
    def lookup_failed(self) -> frozenset[str]:
        return self._lookup_failed

    @property
    def asked_store(self) -> frozenset[str]:
        return self._asked_store

    def __eq__(self, other: object) -> bool:
        # Equal by their data: where a record came from (``origin``) is not part of it.
        if not isinstance(other, AnswerRecord):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, as pydantic models are

    @model_validator(mode="after")
    def _citations_in_answer(self) -> AnswerRecord:
        for i, c in enumerate(self.citations or ()):
            if c.end > len(self.answer):
                raise ValueError(
                    f"citation {i} ends at {c.end}, past the answer ({len(self.answer)} chars)"
                )
        return self

    def passage_map(self) -> dict[str, str]:
        """Passage ID → text, in retrieval order (the first passage wins on duplicate IDs)."""
        out: dict[str, str] = {}
        for p in self.passages:
            out.setdefault(p.id, p.text)
        return out


class Verdict(BaseModel):
    """A judge's answer to "do these passages entail this claim?"."""

    model_config = ConfigDict(frozen=True)

    entailed: bool
    reason: str | None = None
    confidence: float | None = None


class Claim(BaseModel):
    """A checkable statement extracted from an answer, with the citations it carries.

    ``cited_ids`` are the citations in marker order, one per distinct marker: the passage ID
    when a document has the marker as its ID or a numeric marker names a position, the marker
    itself otherwise (a document-level ID found in metadata, or nothing). ``dangling_ids`` is
    the subset of them that names no retrieved passage. ``resolved_ids`` are the passages the
    markers name, in marker order (a metadata ID names every chunk that carries it): what the
    citation check shows the judge.
    """

    sentence: int
    text: str
    cited_ids: list[str] = Field(default_factory=list)
    dangling_ids: list[str] = Field(default_factory=list)
    resolved_ids: list[str] = Field(default_factory=list)
    resolution: dict[str, list[str]] = Field(default_factory=dict)
    """Each cited ID → the passages it named (``[]`` when dangling): what citation precision
    weighs, one citation at a time."""
    quote_mismatch: bool = False
    """A native citation's quote (Anthropic's ``cited_text``) is not in the passage it names."""

    @property
    def cited(self) -> bool:
        return bool(self.cited_ids)


class ClaimResult(BaseModel):
    """The verdict on one claim, as written in ``citemon score --format json``."""

    sentence: int
    text: str
    cited_ids: list[str]
    resolved_ids: list[str] = Field(default_factory=list)
    """The retrieved passages the citations named (docs/design.md, "Passage
    identity"); equal to the non-dangling ``cited_ids`` unless a marker was a metadata ID."""
    verdict: VerdictName
    supported_by: list[str] = Field(default_factory=list)
    faithful: bool | None = None
    overlap: bool = False
    irrelevant_ids: list[str] = Field(default_factory=list)
    reason: str | None = None
    unjudged_cause: UnjudgedCause | None = None
    """Set exactly when the claim lacks its verdict (``unjudged``, or ``uncited`` with
    ``faithful`` unknown): why."""
    search_cut: int = 0
    """Passages the misattribution search did not ask about (``max_judge_calls_per_answer``)."""
    pattern: MisattributionPattern | None = None
    """Set exactly on a ``misattributed`` claim: how its citation went wrong (explains, never
    changes a verdict or a count); left out of the JSON when unset."""
    quote_mismatch: bool = Field(default=False, exclude_if=lambda value: not value)
    """The provider quoted the passage it cites (Anthropic's ``cited_text``) and the quote is
    not in that passage: checked without a judge, beside the verdict (which it never changes);
    left out of the JSON when false."""

    @model_serializer(mode="wrap")
    def _without_unset_pattern(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        if out.get("pattern", "") is None:
            del out["pattern"]
        return out


class AnswerScore(BaseModel):
    """Per-answer result: the ``answers[]`` element of the score output."""

    id: str | None = None
    service: str | None = None
    version: str | None = None
    environment: str | None = None
    trace_id: str | None = None
    claims: list[ClaimResult] = Field(default_factory=list)
    judge_calls: int = 0
    """Judge calls made for this answer (``entails``, or batch calls with a batch judge)."""
    judge_calls_cut: int = 0
    """Judge calls not made because of ``max_judge_calls_per_answer`` (sum of ``search_cut``)."""
    text_source: dict[str, Literal["store"]] = Field(
        default_factory=dict, exclude_if=lambda value: not value
    )
    """Passage ID → ``"store"`` for the passages whose text came from the passage store
    (``--passage-store``) rather than the trace; left out of the JSON when none did."""
    _evidence: dict[str, str] = PrivateAttr(default_factory=dict)
    """Excerpts of the passages the claims cite or are supported by
    (:mod:`citemon._engine.excerpts`), set by the scorer for the results record; never
    serialised."""

    _question: str = PrivateAttr(default="")
    _answer: str = PrivateAttr(default="")
    _passage_chars: dict[str, int] = PrivateAttr(default_factory=dict)
    """The question and answer text and the full length of each excerpted passage, set by the
    scorer for the review record (:mod:`citemon._review.sample`); never serialised."""

    @property
    def evidence(self) -> dict[str, str]:
        return self._evidence

    @property
    def question(self) -> str:
        return self._question

    @property
    def answer(self) -> str:
        return self._answer

    @property
    def passage_chars(self) -> dict[str, int]:
        """Passage ID → length of the whole passage, for each one in :attr:`evidence`."""
        return self._passage_chars
