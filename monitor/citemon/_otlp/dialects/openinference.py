"""The citemon shim and OpenInference (Phoenix; LangChain, LlamaIndex, Haystack, DSPy, …):
``retrieval.documents.{i}.document.{id,content,score,metadata}`` on the answer span or a
``RETRIEVER`` span, or a search tool's result in a ``TOOL`` span's ``output.value``
(:mod:`~citemon._otlp.dialects.agents`); the answer in ``output.value`` of the answer span or an
answer-bearing ``CHAIN``/``AGENT`` span when it is text, else an ``LLM`` span's output message
(a model turn that only calls tools is no answer), or a final-answer tool's result.

The shim's ``rag.answer`` span (or any non-retriever span with both documents and
``output.value``) is a self-contained answer, read on the spot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from citemon._core.errors import DecodeError
from citemon._core.records import AnswerRecord, Passage

# The module, not its names: it imports this package's values (a cycle when it is imported
# first), and its names are looked up when a span is read.
from citemon._otlp import native_citations
from citemon._otlp.dialects import agents
from citemon._otlp.dialects.base import SpanReading
from citemon._otlp.dialects.values import (
    ID_KEYS,
    check_context,
    check_text,
    make_passage,
    text_from_json,
)
from citemon._otlp.spans import NOT_AN_ANSWER, Limits, RawSpan, TraceSpan
from citemon_instrumentation import attributes as A

__all__ = ["OpenInference"]

_ANSWER_KINDS: Final = frozenset({"CHAIN", "LLM", "AGENT"})
_DOC_PREFIX_LEN: Final = len(A.RETRIEVAL_DOCUMENTS_PREFIX)
_OUTPUT_MESSAGES: Final = "llm.output_messages."
_TOOL_NAME: Final = "tool.name"
_REDACTED: Final = "__REDACTED__"
"""What OpenInference records in place of a value its ``TraceConfig`` hides: never text."""
_CAPTURE: Final = (
    "OpenInference's OPENINFERENCE_HIDE_OUTPUTS=false and OPENINFERENCE_HIDE_OUTPUT_MESSAGES=false "
    "(TraceConfig(hide_outputs=False, hide_output_messages=False))"
)


def _documents(attrs: Mapping[str, Any], max_passages: int) -> tuple[list[Passage], bool]:
    """``retrieval.documents.{i}.document.*`` (plus the shim's packed overflow) → passages;
    also whether any document came without content (then it cannot be judged)."""
    docs: dict[str, dict[str, Any]] = {}
    prefix = A.RETRIEVAL_DOCUMENTS_PREFIX
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        dot = key.find(".document.", _DOC_PREFIX_LEN)
        if dot < 0:
            continue
        index = key[_DOC_PREFIX_LEN:dot]
        d = docs.get(index)
        if d is None:
            if not index.isdigit():
                continue
            if len(docs) >= max_passages:
                raise DecodeError("too_many_passages", f"more than {max_passages} documents")
            d = docs[index] = {}
        d[key[dot + 10 :]] = value
    overflow: list[Any] = []
    packed = attrs.get(A.CITEMON_PASSAGES_OVERFLOW)
    if packed is not None:
        try:
            overflow = json.loads(packed) if isinstance(packed, str) else None  # type: ignore[assignment]
        except (json.JSONDecodeError, RecursionError):
            overflow = None  # type: ignore[assignment]
        if not isinstance(overflow, list):
            raise DecodeError("bad_attribute", f"{A.CITEMON_PASSAGES_OVERFLOW} is not a JSON array")
    if len(docs) + len(overflow) > max_passages:
        raise DecodeError(
            "too_many_passages", f"{len(docs) + len(overflow)} documents > {max_passages}"
        )
    missing = False
    out: list[Passage] = []
    for index in sorted(docs, key=int):
        d = docs[index]
        content = d.get(A.DOCUMENT_CONTENT)
        if content is None or content == _REDACTED:
            missing, content = True, ""
        out.append(
            make_passage(
                d.get(A.DOCUMENT_ID),
                content,
                d.get(A.DOCUMENT_SCORE),
                d.get(A.DOCUMENT_METADATA),
                "document",
                int(index),
            )
        )
    for j, d in enumerate(overflow):
        if not isinstance(d, dict):
            raise DecodeError("bad_attribute", f"overflow document {j} is not an object")
        out.append(
            make_passage(
                d.get("id"),
                d.get("content", ""),
                d.get("score"),
                d.get("metadata"),
                "overflow document",
                j,
            )
        )
    return out, missing


def _ids_from_output(attrs: Mapping[str, Any], docs: list[Passage]) -> None:
    """LangChain's instrumentor leaves ``document.id`` out but puts the retriever's output
    (``{"documents": [{"id": ..., ...}]}``) in ``output.value``: take the IDs from there."""
    if all(d.id for d in docs):
        return
    out = attrs.get(A.OUTPUT_VALUE)
    if not isinstance(out, str) or not out.startswith("{"):
        return
    try:
        obj = json.loads(out)
    except (json.JSONDecodeError, RecursionError):
        return
    listed = obj.get("documents") if isinstance(obj, dict) else None
    if not isinstance(listed, list) or len(listed) != len(docs):
        return
    for d, item in zip(docs, listed, strict=True):
        if not d.id and isinstance(item, dict):
            pid = item.get("id")
            if pid is None and isinstance(item.get("metadata"), dict):
                pid = next(
                    (item["metadata"][k] for k in ID_KEYS if item["metadata"].get(k) is not None),
                    None,
                )
            if isinstance(pid, str | int) and not isinstance(pid, bool):
                d.id = str(pid)


def _answer_text(kind: str, attrs: Mapping[str, Any]) -> str | None:
    if kind == "LLM":
        content = attrs.get(A.LLM_OUTPUT_MESSAGE_CONTENT)
        if isinstance(content, str):
            return content
        if any(k.startswith(_OUTPUT_MESSAGES) for k in attrs):
            return None  # output messages without text: a turn that only calls tools
    value = attrs.get(A.OUTPUT_VALUE)
    if not isinstance(value, str):
        return None
    if attrs.get(A.OUTPUT_MIME_TYPE) == "application/json" or value.startswith(("{", "[")):
        try:
            obj = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
        if kind == "LLM" and isinstance(obj, dict) and "tools" in obj:
            return None  # the request prepared for the model (LlamaIndex), not its reply
        if _ends_with_tool_message(obj):
            return None  # LangGraph's tool node: the tool's result, not the model's answer
        return text_from_json(obj)
    return value


def _ends_with_tool_message(obj: Any) -> bool:
    """``{"messages": [..., {"type": "tool", …}]}``: a LangGraph node whose output is a tool's
    result (a search tool's documents would otherwise read as an answer)."""
    messages = obj.get("messages") if isinstance(obj, dict) else None
    last = messages[-1] if isinstance(messages, list) and messages else None
    return isinstance(last, dict) and last.get("type") == "tool"


def _hidden(attrs: Mapping[str, Any]) -> bool:
    """The span's output was hidden by OpenInference's ``TraceConfig`` (and no output message
    text is left in its place)."""
    if attrs.get(A.OUTPUT_VALUE) != _REDACTED:
        return False
    content = attrs.get(A.LLM_OUTPUT_MESSAGE_CONTENT)
    return not isinstance(content, str) or content == _REDACTED


def _plain(attrs: Mapping[str, Any], key: str, mime_key: str) -> str | None:
    v = attrs.get(key)
    if isinstance(v, str) and v != _REDACTED and attrs.get(mime_key) != "application/json":
        return v
    return None


class OpenInference:
    """The citemon shim's ``rag.answer`` span and OpenInference traces."""

    name: Final = "openinference"
    looks_for: Final = (
        "retrieval.documents.{i}.document.* on a RETRIEVER or answer span, or a search tool's "
        "output.value on a TOOL span",
        "output.value of a CHAIN/AGENT span (text), or an LLM span's llm.output_messages",
    )

    def read_span(self, raw: RawSpan, limits: Limits) -> SpanReading:
        attrs = raw.attrs
        kind_v = attrs.get(A.SPAN_KIND)
        kind = kind_v.upper() if isinstance(kind_v, str) else ""
        has_docs = A.CITEMON_PASSAGES_COUNT in attrs or any(
            k.startswith(A.RETRIEVAL_DOCUMENTS_PREFIX) for k in attrs
        )
        is_answer = raw.name == A.ANSWER_SPAN_NAME or (
            has_docs and kind != "RETRIEVER" and A.OUTPUT_VALUE in attrs
        )
        if is_answer:
            record = _record(raw, limits)
            if record is not None and A.CITEMON_CITATIONS_DROPPED in attrs:
                # The shim could not record the provider's citations: as a part, for the
                # assembler to count as citations_not_recorded (scored, every claim would be
                # uncited for a fault of the tracing).
                return _dropped_part(raw, record, self.name)
            return record or NOT_AN_ANSWER
        part = TraceSpan.of(raw, kind=kind, dialect=self.name)
        if kind == "RETRIEVER" and has_docs:
            docs, missing = _documents(attrs, limits.max_passages)
            check_context(docs, limits.max_context_bytes)
            _ids_from_output(attrs, docs)
            out = attrs.get(A.OUTPUT_VALUE)
            if missing and isinstance(out, str):
                missing = not agents.fill_missing_text(docs, out, limits.tools)
            part.documents = docs
            part.truncated |= missing
            part.question = _plain(attrs, A.INPUT_VALUE, "input.mime_type")
            if part.question is not None:
                check_text(part.question, "question", limits.max_answer_bytes)
            part.nbytes += sum(len(d.text) for d in docs)
            return part
        if kind in _ANSWER_KINDS | {"TOOL"} and _hidden(attrs):
            part.no_content = _CAPTURE
            return part
        if kind == "LLM" and (native := native_citations.read_native(attrs, limits)) is not None:
            return native_citations.native_part(part, native)
        if kind == "TOOL":
            result = attrs.get(A.OUTPUT_VALUE)
            if not isinstance(result, str):
                return None
            name = attrs.get(_TOOL_NAME)
            return agents.tool_part(
                raw,
                dialect=self.name,
                kind=kind,
                tool=name if isinstance(name, str) else raw.name,
                result=agents.unwrap_tool_output(result),
                limits=limits,
            )
        if kind in _ANSWER_KINDS:
            answer = _answer_text(kind, attrs)
            if answer is not None:
                check_text(answer, "answer", limits.max_answer_bytes)
                part.answer = answer
                part.question = _plain(attrs, A.INPUT_VALUE, "input.mime_type")
                if part.question is not None:
                    check_text(part.question, "question", limits.max_answer_bytes)
                part.nbytes += len(answer) + len(part.question or "")
                return part
        return None


def _dropped_part(raw: RawSpan, record: AnswerRecord, dialect: str) -> TraceSpan:
    """A shim answer without the native citations it should carry, as a trace part."""
    part = TraceSpan.of(raw, kind="", dialect=dialect)
    part.answer, part.question = record.answer, record.question
    part.documents, part.truncated = record.passages, True
    part.nbytes += len(record.answer) + sum(len(p.text) for p in record.passages)
    return part


def _record(raw: RawSpan, limits: Limits) -> AnswerRecord | None:
    attrs = raw.attrs
    answer = attrs.get(A.OUTPUT_VALUE)
    if answer is None:
        if raw.error:
            return None  # the handler failed before answering: nothing to score
        raise DecodeError("bad_attribute", f"answer span {raw.span_id} has no {A.OUTPUT_VALUE}")
    if not isinstance(answer, str):
        raise DecodeError(
            "bad_attribute", f"{A.OUTPUT_VALUE} is {type(answer).__name__}, not a string"
        )
    question = attrs.get(A.INPUT_VALUE, "")
    if not isinstance(question, str):
        raise DecodeError(
            "bad_attribute", f"{A.INPUT_VALUE} is {type(question).__name__}, not a string"
        )
    check_text(answer, "answer", limits.max_answer_bytes)
    check_text(question, "question", limits.max_answer_bytes)
    passages, missing = _documents(attrs, limits.max_passages)
    check_context(passages, limits.max_context_bytes)
    for i, p in enumerate(passages):
        check_text(p.text, "document")
        if not p.id:
            p.id = str(i + 1)
    count = attrs.get(A.CITEMON_PASSAGES_COUNT)
    truncated = (
        attrs.get(A.CITEMON_TRUNCATED) is True
        or raw.dropped_attributes > 0
        or missing
        or (isinstance(count, int) and count != len(passages))
    )
    record = AnswerRecord(
        id=raw.span_id,
        question=question,
        answer=answer,
        passages=passages,
        service=raw.resource.service,
        version=raw.resource.version,
        environment=raw.resource.environment,
        trace_id=raw.trace_id,
        span_id=raw.span_id,
        truncated=truncated,
        citations=native_citations.shim_citations(attrs, answer),
    )
    where = f"span {raw.name!r} {raw.span_id} (openinference, self-contained)"
    record.origin.update(passages=f"{where}: {len(passages)} document(s)", answer=where)
    return record
