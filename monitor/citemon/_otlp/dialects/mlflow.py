"""MLflow tracing (``mlflow-tracing``, autologging), exported over OTLP: every value is
JSON-encoded. Measured on LangChain autolog (mlflow-tracing 3.17): the retriever span has
``mlflow.spanType`` = ``"RETRIEVER"`` and its documents in ``mlflow.spanOutputs``
(``[{"page_content", "metadata", "id"}]``); the answer is the root span's ``mlflow.spanOutputs``
(a JSON string, or a chat response), a chat model's output the fallback.
"""

from __future__ import annotations

import json
from typing import Any, Final

from citemon._otlp.dialects.base import SpanReading
from citemon._otlp.dialects.values import check_text, passages_from_items, text_from_json
from citemon._otlp.spans import Limits, RawSpan, TraceSpan

__all__ = ["MLflow"]

_TYPE: Final = "mlflow.spanType"
_OUTPUTS: Final = "mlflow.spanOutputs"
_INPUTS: Final = "mlflow.spanInputs"
_MODEL_TYPES: Final = frozenset({"LLM", "CHAT_MODEL"})
_QUESTION_KEYS: Final = ("question", "query", "input", "inputs")


def _decoded(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return None


class MLflow:
    """MLflow tracing spans (any span with ``mlflow.spanType``)."""

    name: Final = "mlflow"
    looks_for: Final = (
        "mlflow.spanOutputs of a span with mlflow.spanType RETRIEVER",
        "the root span's mlflow.spanOutputs",
    )

    def read_span(self, raw: RawSpan, limits: Limits) -> SpanReading:
        attrs = raw.attrs
        span_type = _decoded(attrs.get(_TYPE))
        if not isinstance(span_type, str):
            return None
        part = TraceSpan.of(raw, kind=span_type, dialect=self.name)
        question = _question(_decoded(attrs.get(_INPUTS)))
        if question is not None:
            check_text(question, "question", limits.max_answer_bytes)
        if span_type == "RETRIEVER":
            docs = _decoded(attrs.get(_OUTPUTS))
            if not isinstance(docs, list):
                return None
            part.documents = passages_from_items(docs, "retriever", limits)
            part.question = question
            part.nbytes += sum(len(d.text) for d in part.documents)
            return part
        if raw.parent_span_id and span_type not in _MODEL_TYPES:
            return None  # an inner step: its output is not the answer
        answer = _answer(_decoded(attrs.get(_OUTPUTS)))
        if answer is None:
            return None
        check_text(answer, "answer", limits.max_answer_bytes)
        part.answer, part.question = answer, question
        part.nbytes += len(answer) + len(question or "")
        return part


def _answer(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        choices = value.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
            if isinstance(message, dict) and isinstance(message.get("content"), str):
                return str(message["content"])
        return text_from_json(value)
    return None


def _question(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in _QUESTION_KEYS:
            if isinstance(value.get(key), str):
                return str(value[key])
    return None
