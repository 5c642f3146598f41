"""The passage store protocol: where the text of a passage that arrived without it is looked up.

A trace may carry a retrieved document's ID and no text (the OpenTelemetry GenAI conventions'
``{id, score}`` documents, content capture turned off). A :class:`PassageStore` gives the text
for such IDs, all of one answer's at once; :mod:`citemon._passages` holds the backends
(PostgreSQL, Chroma, HTTP, SQLite, JSONL, plugins) and the layer that caches, bounds and retries
them, and the scorer (:mod:`citemon._engine.passage_text`) asks it before judging.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, Protocol, runtime_checkable

from citemon._core.errors import CitemonError

__all__ = [
    "LOOKUP_OUTCOMES",
    "LookupOutcome",
    "PassageLookupError",
    "PassageObserver",
    "PassageStore",
]


@runtime_checkable
class PassageStore(Protocol):
    """Gives the text of passages by ID.

    ``lookup`` receives every ID one answer needs, deduplicated, and returns ID → text for those
    the store holds; an ID it lacks is simply absent from the mapping. It raises (any exception;
    the managing layer turns it into :class:`PassageLookupError`) when the store cannot answer.
    IDs come from traces: untrusted input, to be bound as query parameters, never pasted.
    """

    async def lookup(self, ids: Sequence[str]) -> Mapping[str, str]: ...


class PassageLookupError(CitemonError):
    """The passage store could not answer (after its retries): the claims citing the passages
    it was asked for are ``unjudged`` with cause ``passage_lookup_failed``, never wrong."""


LookupOutcome = Literal["cached", "fetched", "not_found", "failed"]
"""What became of one passage ID asked of the store (``citemon_passage_lookups_total``)."""

LOOKUP_OUTCOMES: tuple[LookupOutcome, ...] = ("cached", "fetched", "not_found", "failed")


@runtime_checkable
class PassageObserver(Protocol):
    """Where the managed store reports (the metrics module implements this).

    ``looked_up(outcome, n)``: ``n`` passage IDs ended with ``outcome``; ``round_trip(seconds,
    ok)``: one call to the backend ended.
    """

    def looked_up(self, outcome: LookupOutcome, n: int) -> None: ...

    def round_trip(self, seconds: float, ok: bool) -> None: ...
