"""OpenLLMetry (Traceloop's ``opentelemetry-instrumentation-*``): everything as JSON strings.

Measured on LangChain and LlamaIndex traces (instrumentations 0.62): a retriever task's
``traceloop.entity.output`` holds the documents — LangChain ``{"documents": [{"page_content",
"metadata"}], "count"}`` (``Document.id`` is dropped), LlamaIndex a list of JSON-encoded
node-with-score objects. The answer is the workflow span's ``traceloop.entity.output``
(LangChain ``{"outputs": text}``, LlamaIndex ``{"response": text}``, or a JSON string), or a chat
span's ``gen_ai.output.messages`` / ``gen_ai.completion.{i}.content``.
"""

from __future__ import annotations

import json
from typing import Any, Final

from citemon._otlp.dialects.base import SpanReading
from citemon._otlp.dialects.values import (
    check_text,
    json_value,
    messages_text,
    passages_from_items,
)
from citemon._otlp.spans import Limits, RawSpan, TraceSpan

__all__ = ["OpenLLMetry"]

_KIND: Final = "traceloop.span.kind"
_OUTPUT: Final = "traceloop.entity.output"
_INPUT: Final = "traceloop.entity.input"
_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
_COMPLETION: Final = "gen_ai.completion.0.content"
_ANSWER_KEYS: Final = ("outputs", "response", "output", "answer")
_QUESTION_KEYS: Final = ("inputs", "query", "str_or_query_bundle", "query_str", "question", "input")


class OpenLLMetry:
    """Traceloop's OpenLLMetry spans (any span with a ``traceloop.*`` attribute)."""

    name: Final = "openllmetry"
    looks_for: Final = (
        "a retriever task's traceloop.entity.output (documents or nodes)",
        "the workflow's traceloop.entity.output, or gen_ai.output.messages",
    )

    def read_span(self, raw: RawSpan, limits: Limits) -> SpanReading:
        attrs = raw.attrs
        if not any(k.startswith("traceloop.") for k in attrs):
            return None
        kind = attrs.get(_KIND)
        part = TraceSpan.of(raw, kind=str(kind or ""), dialect=self.name)
        output = json_value(attrs.get(_OUTPUT))
        docs = _documents(output)
        if docs is not None:
            part.documents = passages_from_items(docs, "retriever", limits)
            part.question = _question(json_value(attrs.get(_INPUT)))
            if part.question is not None:
                check_text(part.question, "question", limits.max_answer_bytes)
            part.nbytes += sum(len(d.text) for d in part.documents)
            return part
        answer: str | None = None
        if kind == "workflow":
            answer = _answer(attrs.get(_OUTPUT))
            part.question = _question(json_value(attrs.get(_INPUT)))
        if answer is None:
            answer = messages_text(attrs.get(_OUTPUT_MESSAGES))
        if answer is None and isinstance(attrs.get(_COMPLETION), str):
            answer = attrs[_COMPLETION]
        if answer is None:
            return None
        check_text(answer, "answer", limits.max_answer_bytes)
        if part.question is not None:
            check_text(part.question, "question", limits.max_answer_bytes)
        part.answer = answer
        part.nbytes += len(answer) + len(part.question or "")
        return part


def _documents(output: Any) -> list[Any] | None:
    """The documents a retriever task returned, or ``None`` when this output is not that."""
    if isinstance(output, dict) and isinstance(output.get("documents"), list):
        return list(output["documents"])
    if isinstance(output, list) and output:
        first = json_value(output[0]) if isinstance(output[0], str) else output[0]
        if isinstance(first, dict) and isinstance(first.get("node"), dict):
            return output
    return None


def _answer(value: Any) -> str | None:
    """A workflow's output as text: a JSON string, or the text under a known key."""
    if not isinstance(value, str):
        return None
    decoded = json_value(value)
    if decoded is None:
        stripped = value.strip()
        if stripped.startswith('"'):
            try:
                text = json.loads(stripped)
            except ValueError:
                return None
            return text if isinstance(text, str) else None
        return value if stripped else None
    if isinstance(decoded, dict):
        for key in _ANSWER_KEYS:
            if isinstance(decoded.get(key), str):
                return str(decoded[key])
    return None


def _question(value: Any, depth: int = 0) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and depth < 3:
        for key in _QUESTION_KEYS:
            if key in value:
                found = _question(value[key], depth + 1)
                if found is not None:
                    return found
    return None
