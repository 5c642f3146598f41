"""The span contract: attribute names the shim writes and the monitor reads (docs/spans.md).

OpenInference names are used wherever one exists, so Phoenix-style tools read the shim's spans
too; the ``citemon.*`` names carry what OpenInference has no word for (truncation, and the
passages that did not fit the span's attribute budget).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ANSWER_SPAN_NAME",
    "CITEMON_CITATIONS",
    "CITEMON_CITATIONS_DROPPED",
    "CITEMON_PASSAGES_COUNT",
    "CITEMON_PASSAGES_OVERFLOW",
    "CITEMON_REDACTION_FAILED",
    "CITEMON_TRUNCATED",
    "DEPLOYMENT_ENVIRONMENT",
    "DEPLOYMENT_ENVIRONMENT_OLD",
    "DOCUMENT_CONTENT",
    "DOCUMENT_ID",
    "DOCUMENT_METADATA",
    "DOCUMENT_SCORE",
    "INPUT_VALUE",
    "LLM_OUTPUT_MESSAGE_CONTENT",
    "OUTPUT_MIME_TYPE",
    "OUTPUT_VALUE",
    "RETRIEVAL_DOCUMENTS_PREFIX",
    "SERVICE_NAME",
    "SERVICE_VERSION",
    "SPAN_KIND",
    "document_key",
    "document_keys",
]

ANSWER_SPAN_NAME: Final = "rag.answer"
"""Name of the shim's self-contained answer span."""

SPAN_KIND: Final = "openinference.span.kind"
"""``CHAIN`` on the shim's span; ``RETRIEVER``/``LLM``/``CHAIN`` on OpenInference traces."""
INPUT_VALUE: Final = "input.value"
"""The question."""
OUTPUT_VALUE: Final = "output.value"
"""The answer (on OpenInference spans it may be JSON; see ``output.mime_type``)."""
OUTPUT_MIME_TYPE: Final = "output.mime_type"
LLM_OUTPUT_MESSAGE_CONTENT: Final = "llm.output_messages.0.message.content"
"""An LLM span's first output message: the plain-text answer when ``output.value`` is JSON."""

RETRIEVAL_DOCUMENTS_PREFIX: Final = "retrieval.documents."
"""``retrieval.documents.{i}.document.{id,content,score,metadata}``, ``i`` from 0."""
DOCUMENT_ID: Final = "id"
DOCUMENT_CONTENT: Final = "content"
DOCUMENT_SCORE: Final = "score"
DOCUMENT_METADATA: Final = "metadata"
"""A JSON object, as a string."""

CITEMON_TRUNCATED: Final = "citemon.truncated"
"""``True`` when the shim could not record everything: the answer is scored ``unjudged``."""
CITEMON_PASSAGES_COUNT: Final = "citemon.passages.count"
"""How many passages the service retrieved, so a decoder can tell when some went missing."""
CITEMON_PASSAGES_OVERFLOW: Final = "citemon.passages.overflow"
"""Passages past the per-document attribute budget, packed as one JSON array of
``{"id", "content", "score", "metadata"}`` objects (one attribute, however many passages)."""
CITEMON_CITATIONS: Final = "citemon.citations"
"""The answer's native citations (the provider's, recorded by a ``record_*_citations`` helper):
a JSON list of ``{start, end, ids, quote}``, character offsets into ``output.value``."""
CITEMON_CITATIONS_DROPPED: Final = "citemon.citations_dropped"
"""Why a ``record_*_citations`` helper recorded the answer without its native citations (their
offsets would not fit the recorded answer): the monitor counts the answer as
``citations_not_recorded``, never as uncited."""
CITEMON_REDACTION_FAILED: Final = "citemon.redaction_failed"
"""The redact hook raised: the affected text was not recorded at all (never unredacted)."""

SERVICE_NAME: Final = "service.name"
SERVICE_VERSION: Final = "service.version"
DEPLOYMENT_ENVIRONMENT: Final = "deployment.environment.name"
DEPLOYMENT_ENVIRONMENT_OLD: Final = "deployment.environment"
"""The pre-1.27 semantic-conventions name, still common; read when the new one is absent."""

_FIELDS: Final = (DOCUMENT_ID, DOCUMENT_CONTENT, DOCUMENT_SCORE, DOCUMENT_METADATA)
_KEY_CACHE_SIZE: Final = 256
_KEYS: Final[tuple[tuple[str, str, str, str], ...]] = tuple(
    tuple(f"{RETRIEVAL_DOCUMENTS_PREFIX}{i}.document.{f}" for f in _FIELDS)  # type: ignore[misc]
    for i in range(_KEY_CACHE_SIZE)
)


def document_key(index: int, field: str) -> str:
    """``retrieval.documents.{index}.document.{field}`` (cached for the first 256 indices)."""
    if index < _KEY_CACHE_SIZE and field in _FIELDS:
        return _KEYS[index][_FIELDS.index(field)]
    return f"{RETRIEVAL_DOCUMENTS_PREFIX}{index}.document.{field}"


def document_keys(index: int) -> tuple[str, str, str, str]:
    """The ``id``, ``content``, ``score`` and ``metadata`` keys of document ``index``."""
    if index < _KEY_CACHE_SIZE:
        return _KEYS[index]
    return tuple(f"{RETRIEVAL_DOCUMENTS_PREFIX}{index}.document.{f}" for f in _FIELDS)  # type: ignore[return-value]
