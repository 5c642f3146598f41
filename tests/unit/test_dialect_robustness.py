"""Whatever shape an instrumentation puts in the attributes a dialect reads, decoding gives a
batch or a :class:`DecodeError`, never another exception (nothing crashes the monitor)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from typing import Any

import pytest

from citemon._core.errors import DecodeError
from citemon._otlp.decoding import decode_otlp, read_spans
from citemon._otlp.spans import Limits, RawSpan, ResourceInfo

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
    "ai.toolCall.result",
    "ai.response.text",
    "ai.prompt",
    "gen_ai.tool.call.result",
    "tool_response",
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
    '{"prompt": [{"role": "user", "content": 5}]}',
    '{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}',
    '[{"id": "p-1", "text": "t"}, {"id": 2}]',
    '"\\ud800"',
    '[{"id": "p-1", "text": "\\ud800"}]',
    "[" * 5000,
    ["a", "b"],
    # Tool results (agents): shapes the readers try, malformed.
    '[{"id": "p-1", "text": 5}]',
    '[{"id": 1e400, "text": "t"}]',
    '[{"id": "p-1", "score": "x", "text": "t", "metadata": 3}]',
    "[Document(id='p-1', page_content=5)]",
    "[Document(id=b'p', page_content='t', metadata={1: 2})]",
    "[{'id': 'p-1', 'text': '\ud800'}]",
    "===== Document p-1 =====",
    "passage_id: p-1\n\n",
    "[p-1]",
    "__REDACTED__",
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
    {"ai.operationId": "ai.toolCall"},
    {"ai.operationId": "ai.generateText"},
    {"openinference.span.kind": "TOOL"},
    {"openinference.span.kind": "TOOL", "tool.name": "final_answer"},
    {"gen_ai.operation.name": "execute_tool"},
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


def _otlp_json(resource: list[dict[str, Any]], attrs: list[dict[str, Any]]) -> bytes:
    span = {"traceId": "a" * 32, "spanId": "b" * 16, "name": "rag.answer", "attributes": attrs}
    return json.dumps(
        {
            "resourceSpans": [
                {"resource": {"attributes": resource}, "scopeSpans": [{"spans": [span]}]}
            ]
        }
    ).encode()


_ANSWER = [
    {"key": "output.value", "value": {"stringValue": "An answer [1]."}},
    {"key": "retrieval.documents.0.document.content", "value": {"stringValue": "A passage."}},
]
_HUGE = 10**400  # a JSON integer no float holds


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        # A document score past float's range (an OTLP JSON intValue is a decimal string).
        (
            _otlp_json(
                [],
                [
                    *_ANSWER,
                    {
                        "key": "retrieval.documents.0.document.score",
                        "value": {"intValue": str(_HUGE)},
                    },
                ],
            ),
            "bad_attribute",
        ),
        (
            _otlp_json([], [*_ANSWER, {"key": "x", "value": {"doubleValue": _HUGE}}]),
            "bad_attribute",
        ),
        (_otlp_json([{"key": "x", "value": {"doubleValue": _HUGE}}], _ANSWER), "bad_attribute"),
        (_otlp_json([{"key": "x", "value": {"doubleValue": "abc"}}], _ANSWER), "bad_attribute"),
        # An integer literal of more digits than Python converts (4300).
        (b'{"resourceSpans": [], "x": ' + b"1" * 5000 + b"}", "not_json"),
    ],
    ids=["document-score", "span-double", "resource-double", "resource-double-text", "digits"],
)
def test_numbers_python_cannot_convert_are_decode_errors(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_otlp(payload)
    assert caught.value.reason == reason


def test_a_huge_document_score_in_a_dialects_json_is_a_decode_error() -> None:
    docs = json.dumps([{"id": "a", "content": "t", "score": _HUGE}])
    attrs = {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.documents": docs}
    with pytest.raises(DecodeError) as caught:
        read_spans([span(attrs, "c" * 16)], Limits())
    assert caught.value.reason == "bad_attribute"


_GENAI_ANSWER = json.dumps(
    [{"role": "assistant", "parts": [{"type": "text", "content": "An answer [1]."}]}]
)
_LONE = "\ud800"  # what JSON's "\ud800" escape decodes to: no UTF-8 encoding exists for it


@pytest.mark.parametrize(
    ("resource", "attrs"),
    [
        ([{"key": "service.version", "value": {"stringValue": f"v{_LONE}"}}], _ANSWER),
        (
            [],
            [
                *_ANSWER,
                {"key": "retrieval.documents.0.document.id", "value": {"stringValue": _LONE}},
            ],
        ),
        (
            [],
            [
                *_ANSWER,
                {
                    "key": "retrieval.documents.0.document.metadata",
                    "value": {"stringValue": json.dumps({"source": _LONE})},
                },
            ],
        ),
    ],
    ids=["version-label", "passage-id", "metadata-in-json-in-an-attribute"],
)
def test_a_lone_surrogate_anywhere_a_record_keeps_text_is_invalid_utf8(
    resource: list[dict[str, Any]], attrs: list[dict[str, Any]]
) -> None:
    # Such a record could not be written to the results topic, and a label holding one makes
    # every /metrics scrape fail from then on: the span is refused where it is read.
    with pytest.raises(DecodeError) as caught:
        decode_otlp(_otlp_json(resource, attrs))
    assert caught.value.reason == "invalid_utf8"


@pytest.mark.parametrize("key", ["id", "metadata"])
def test_a_lone_surrogate_in_json_inside_any_dialects_documents_is_invalid_utf8(key: str) -> None:
    document = {"page_content": "A passage.", "id": "p-1", "metadata": {"source": "a.md"}}
    document[key] = _LONE if key == "id" else {"source": _LONE}
    attrs = {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.retrieval.documents": json.dumps([document]),  # escaped: valid UTF-8 on the wire
    }
    answer = {"gen_ai.operation.name": "chat", "gen_ai.output.messages": _GENAI_ANSWER}
    batch = read_spans([span(attrs, "c" * 16), span(answer, "c" * 16)], Limits())
    assert [e.reason for e in batch.errors] == ["invalid_utf8"]  # this span only
    assert [s.answer for s in batch.spans] == ["An answer [1]."]
    assert all(s.documents is None for s in batch.spans)


def test_an_escaped_surrogate_pair_is_a_character_not_an_error() -> None:
    # json.dumps escapes 😀 as a surrogate pair ("\ud83d\ude00"): one valid character, read.
    answer = [{"key": "output.value", "value": {"stringValue": "Kept 90 days 😀 [1]."}}]
    payload = _otlp_json([], [*answer, *_ANSWER[1:]])
    assert b"\\ud83d\\ude00" in payload
    (record,) = decode_otlp(payload).records
    assert record.answer == "Kept 90 days 😀 [1]."
