"""Record an answer's native citations from the provider's response object, one line per
provider, for a team whose instrumentation drops them (docs/dialects.md, "Native citations")::

    with answer_span(question) as span:
        response = client.messages.create(model=..., messages=messages)
        record_anthropic_citations(span, response, messages=messages)

Each helper reads the response duck-typed (the SDK object's ``model_dump``, or a dict: no
provider SDK is imported), records on the answer span the passages the model saw
(:meth:`AnswerSpan.set_passages`), the answer's text (:meth:`AnswerSpan.set_answer`) and the
citations (``citemon.citations``: character offsets into the answer, the passage IDs each names,
the provider's quote), so call it instead of those two. Like the rest of the shim it never raises
into the host: a response it cannot read is counted as a shim error (:data:`STATS`) and ``False``
is returned.

With a redact hook that changes the answer's length, or an answer longer than the SDK's
attribute length limit (which cuts it), the offsets no longer fit the text: the citations are
not recorded, the span says why (``citemon.citations_dropped``), and the monitor counts the
answer ``citations_not_recorded`` (scored, its claims would all be uncited).
"""

from __future__ import annotations

from typing import Any

from citemon_instrumentation._shim import AnswerSpan

__all__ = [
    "record_anthropic_citations",
    "record_cohere_citations",
    "record_gemini_citations",
    "record_openai_citations",
]


def record_anthropic_citations(
    span: AnswerSpan, response: Any, *, messages: Any, system: Any = None
) -> bool:
    """An Anthropic Messages response (``anthropic.types.Message`` or its JSON) and the request's
    ``messages`` (and ``system``), which hold the ``document`` / ``search_result`` blocks its
    citations point at by index."""
    request: dict[str, Any] = {"messages": messages}
    if system is not None:
        request["system"] = system
    return span.set_native_citations("anthropic", response, request)


def record_openai_citations(span: AnswerSpan, response: Any, *, tools: Any = None) -> bool:
    """An OpenAI Responses API response (``file_citation`` matched to the ``file_search_call``
    results: ask for them with ``include=["file_search_call.results"]``; ``url_citation``) or
    a Chat Completions response (``url_citation``), with the request's ``tools``."""
    return span.set_native_citations(
        "openai", response, {"tools": tools} if tools is not None else {}
    )


def record_cohere_citations(span: AnswerSpan, response: Any, *, documents: Any) -> bool:
    """A Cohere v2 chat response (``cohere.ChatResponse`` or its JSON) and the request's
    ``documents``, which its citations name by ID."""
    return span.set_native_citations("cohere", response, {"documents": documents})


def record_gemini_citations(span: AnswerSpan, response: Any, *, tools: Any = None) -> bool:
    """A Gemini ``GenerateContentResponse`` (or its JSON) with grounding metadata, and the
    request's ``tools`` (file search, Google Search)."""
    return span.set_native_citations(
        "gemini", response, {"tools": tools} if tools is not None else {}
    )
