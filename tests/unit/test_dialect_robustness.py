"""Whatever shape an instrumentation puts in the attributes a dialect reads, decoding gives a
batch or a :class:`DecodeError`, never another exception (nothing crashes the monitor)."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest

from citemon.core.errors import DecodeError
from citemon.otlp.decoding import read_spans
from citemon.otlp.spans import Limits, RawSpan, ResourceInfo

KEYS = (
    "traceloop.entity.output",
    "traceloop.entity.input",
    "gen_ai.output.messages",
    "gen_ai.input.messages",
    "gen_ai.retrieval.documents",
    "gen_ai.completion.0.content",
    "mlflow.spanOutputs",
    "mlflow.spanInputs",
    "output.value",
    "retrieval.documents.0.document.content",
    "retrieval.documents.0.document.metadata",
)
VALUES: tuple[Any, ...] = (
    1,
    1.5,
    True,
    "",
    "{",
    "[1, 2]",
    "null",
    "[null]",
    '"text"',
    '{"documents": 5}',
    '{"documents": [1]}',
    '{"documents": [{"page_content": 5}]}',
    '{"documents": [{"page_content": "t", "id": [1]}]}',
    '{"documents": [{"page_content": "t", "metadata": "m", "score": "x"}]}',
    '[{"node": 5}]',
    '["{\\"node\\": {\\"text\\": 7}}"]',
    '{"choices": [1]}',
    '{"choices": [{"message": 5}]}',
    '[{"role": "assistant", "parts": 5}]',
    '[{"role": "assistant", "parts": [{"type": "text", "content": 5}]}]',
    '[{"id": {"a": 1}, "content": "t"}]',
    '{"outputs": [1], "response": {"x": 1}}',
    "[" * 5000,
    ["a", "b"],
)
SETTINGS = (
    {},
    {"traceloop.span.kind": "workflow"},
    {"traceloop.span.kind": "task"},
    {"mlflow.spanType": '"RETRIEVER"'},
    {"mlflow.spanType": '"CHAT_MODEL"'},
    {"gen_ai.operation.name": "retrieval"},
    {"gen_ai.operation.name": "chat"},
    {"openinference.span.kind": "RETRIEVER"},
    {"openinference.span.kind": "CHAIN"},
    {"openinference.span.kind": "LLM"},
)


def span(attrs: dict[str, Any], parent: str) -> RawSpan:
    return RawSpan(
        resource=ResourceInfo(),
        trace_id="a" * 32,
        span_id="b" * 16,
        parent_span_id=parent,
        name="s",
        start_ns=1,
        end_ns=2,
        error=False,
        dropped_attributes=0,
        attrs=attrs,
    )


@pytest.mark.parametrize("key", KEYS)
def test_malformed_values_are_decode_errors_or_nothing(key: str) -> None:
    outcomes: Counter[str] = Counter()
    for setting, value, parent in itertools.product(SETTINGS, VALUES, ("", "c" * 16)):
        attrs = {**setting, key: value}
        try:
            read_spans([span(attrs, parent)], Limits(max_passages=3))
        except DecodeError as exc:  # anything else fails the test
            outcomes[exc.reason] += 1
        else:
            outcomes["decoded"] += 1
    assert outcomes["decoded"] > 0
    assert set(outcomes) <= {"decoded", "bad_attribute", "no_answer_spans", "invalid_utf8"}
