"""The OpenTelemetry GenAI semantic conventions (as ``opentelemetry-util-genai`` emits them):
a span with ``gen_ai.operation.name`` = ``retrieval`` carries ``gen_ai.retrieval.documents``
(JSON ``[{id, score, …}]``; the text under ``content`` only when the application records it —
the typed ``RetrievalDocument`` has only ``id`` and ``score``); the answer is the text of a
span's ``gen_ai.output.messages`` (chat, workflow, agent: the outermost wins).
"""

from __future__ import annotations

from typing import Final

from citemon._otlp.dialects.base import SpanReading
from citemon._otlp.dialects.values import (
    check_text,
    json_value,
    messages_text,
    passages_from_items,
)
from citemon._otlp.spans import Limits, RawSpan, TraceSpan

__all__ = ["GenAI"]

_OPERATION: Final = "gen_ai.operation.name"
_DOCUMENTS: Final = "gen_ai.retrieval.documents"
_QUERY: Final = "gen_ai.retrieval.query.text"
_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
_INPUT_MESSAGES: Final = "gen_ai.input.messages"


class GenAI:
    """GenAI semantic-convention spans (``gen_ai.operation.name`` or ``gen_ai.output.messages``)."""

    name: Final = "genai"
    looks_for: Final = (
        "gen_ai.retrieval.documents on a gen_ai.operation.name=retrieval span",
        "gen_ai.output.messages (text parts)",
    )

    def read_span(self, raw: RawSpan, limits: Limits) -> SpanReading:
        attrs = raw.attrs
        operation = attrs.get(_OPERATION)
        if operation is None and _OUTPUT_MESSAGES not in attrs:
            return None
        part = TraceSpan.of(raw, kind=str(operation or ""), dialect=self.name)
        if _DOCUMENTS in attrs:
            docs = json_value(attrs[_DOCUMENTS])
            if not isinstance(docs, list):
                return None
            part.documents = passages_from_items(docs, _DOCUMENTS, limits)
            query = attrs.get(_QUERY)
            part.question = query if isinstance(query, str) else None
            if part.question is not None:
                check_text(part.question, "question", limits.max_answer_bytes)
            part.nbytes += sum(len(d.text) for d in part.documents)
            return part
        answer = messages_text(attrs.get(_OUTPUT_MESSAGES))
        if answer is None:
            return None
        check_text(answer, "answer", limits.max_answer_bytes)
        part.answer = answer
        question = _user_text(attrs.get(_INPUT_MESSAGES))
        if question is not None:
            check_text(question, "question", limits.max_answer_bytes)
            part.question = question
        part.nbytes += len(answer) + len(question or "")
        return part


def _user_text(value: object) -> str | None:
    messages = json_value(value)
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            parts = message.get("parts")
            if isinstance(parts, list):
                texts = [
                    p["content"]
                    for p in parts
                    if isinstance(p, dict) and isinstance(p.get("content"), str)
                ]
                if texts:
                    return "".join(texts)
    return None
