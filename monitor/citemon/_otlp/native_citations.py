"""The citations providers return as structure (Anthropic, OpenAI, Cohere, Gemini), read from
the whole response an instrumentation recorded (OpenInference's ``output.value`` on an ``LLM``
span, with the request in ``input.value``) or from the shim's ``citemon.citations`` attribute
(docs/dialects.md, "Native citations").

The providers' shapes are read by one reader shared with the shim
(:mod:`citemon_instrumentation._native`, whose docstring has the table of shapes), so that what
the shim records from a response object and what the monitor reads from a trace agree. Offsets
that disagree with the text they claim to cover are ``bad_attribute``: explained, not guessed
at.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from citemon._core.errors import DecodeError
from citemon._core.records import NativeCitation, Passage
from citemon._otlp.dialects.values import check_context, check_text, json_value
from citemon._otlp.spans import Limits, TraceSpan
from citemon_instrumentation import _native
from citemon_instrumentation import attributes as A

__all__ = ["NativeAnswer", "native_part", "read_native", "shim_citations"]


@dataclass(slots=True)
class NativeAnswer:
    """What one provider response holds: the answer, the passages, the citations."""

    provider: str
    answer: str
    question: str | None
    passages: list[Passage]
    citations: list[NativeCitation]


def read_native(attrs: Mapping[str, Any], limits: Limits) -> NativeAnswer | None:
    """The native citations of an ``LLM`` span whose ``output.value`` is a provider's whole
    response; ``None`` when it is none of these providers', or neither asked for nor carries
    citations (then the span is read as before)."""
    out = json_value(attrs.get(A.OUTPUT_VALUE))
    if not isinstance(out, dict):
        return None
    request = json_value(attrs.get(A.INPUT_VALUE))
    try:
        got = _native.parse_response(out, request if isinstance(request, dict) else {})
    except _native.CitationShapeError as exc:
        raise DecodeError("bad_attribute", str(exc)) from exc
    if got is None:
        return None
    if len(got.passages) > limits.max_passages:
        raise DecodeError(
            "too_many_passages", f"{len(got.passages)} documents > {limits.max_passages}"
        )
    answer = NativeAnswer(
        got.provider,
        got.answer,
        got.question,
        [Passage.model_validate(p.as_dict()) for p in got.passages],
        [NativeCitation.model_validate(c.as_dict()) for c in got.citations],
    )
    check_text(answer.answer, "answer", limits.max_answer_bytes)
    check_context(answer.passages, limits.max_context_bytes)
    if answer.question is not None:
        check_text(answer.question, "question", limits.max_answer_bytes)
    # JSON may escape a lone surrogate anywhere in the response or the request: refused as the
    # other readers refuse it (a record holding one cannot be written as JSON).
    for p in answer.passages:
        check_text(p.text, "document")
        check_text(p.id, "passage ID")
        if p.metadata:
            check_text(json.dumps(p.metadata, ensure_ascii=False), "passage metadata")
    _check_citations(answer.citations)
    return answer


def _check_citations(citations: list[NativeCitation]) -> None:
    for c in citations:
        for pid in c.ids:
            check_text(pid, "cited ID")
        if c.quote is not None:
            check_text(c.quote, "quote")


def shim_citations(attrs: Mapping[str, Any], answer: str) -> list[NativeCitation] | None:
    """The native citations the shim recorded on an answer span (``citemon.citations``: a JSON
    list of ``{start, end, ids, quote}``), checked against the answer; ``None`` when absent."""
    value = attrs.get(A.CITEMON_CITATIONS)
    if value is None:
        return None
    try:
        items = json.loads(value) if isinstance(value, str) else None
    except (json.JSONDecodeError, RecursionError):
        items = None
    if not isinstance(items, list):
        raise DecodeError("bad_attribute", f"{A.CITEMON_CITATIONS} is not a JSON array")
    out: list[NativeCitation] = []
    for i, item in enumerate(items):
        try:
            citation = NativeCitation.model_validate(item)
        except ValueError as exc:
            raise DecodeError("bad_attribute", f"{A.CITEMON_CITATIONS} item {i}: {exc}") from exc
        if not citation.start <= citation.end <= len(answer):
            raise DecodeError(
                "bad_attribute",
                f"{A.CITEMON_CITATIONS} item {i} covers {citation.start}..{citation.end}, "
                f"outside the answer ({len(answer)} chars)",
            )
        out.append(citation)
    _check_citations(out)
    return out


def native_part(part: TraceSpan, native: NativeAnswer) -> TraceSpan:
    """``part`` (an ``LLM`` span) carrying the answer, its passages and its citations: one span
    holds a whole answer (the trace assembler joins it with any retriever spans)."""
    part.answer = native.answer
    part.documents = native.passages
    part.citations = native.citations
    part.question = native.question
    part.nbytes += len(native.answer) + sum(len(p.text) for p in native.passages)
    part.nbytes += len(native.question or "")
    return part
