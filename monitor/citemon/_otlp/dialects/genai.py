"""The OpenTelemetry GenAI semantic conventions (as ``opentelemetry-util-genai`` emits them):
a span with ``gen_ai.operation.name`` = ``retrieval`` carries ``gen_ai.retrieval.documents``
(JSON ``[{id, score, …}]``; the text under ``content`` only when the application records it —
the typed ``RetrievalDocument`` has only ``id`` and ``score``); the answer is the text of a
span's ``gen_ai.output.messages`` (chat, workflow, agent: the outermost wins).

Agents (:mod:`~citemon._otlp.dialects.agents`): an ``execute_tool`` span's
``gen_ai.tool.call.result`` (Pydantic AI's older ``running tool`` spans: ``tool_response``) is a
search tool's result; so is a ``tool_call_response`` part of a chat span's input messages, read
when the trace has no tool span. A chat or tool span with its content left out (capture off)
says so, for the ``no_content`` outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from citemon._core.records import Passage
from citemon._otlp.dialects import agents
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
_TOOL_NAME: Final = "gen_ai.tool.name"
_TOOL_RESULTS: Final = ("gen_ai.tool.call.result", "tool_response")
_TOOL_ARGUMENTS: Final = ("gen_ai.tool.call.arguments", "tool_arguments")
_CHAT_OPERATIONS: Final = frozenset({"chat", "text_completion", "generate_content"})
_CAPTURE_GENAI: Final = (
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only (the OpenTelemetry GenAI "
    "instrumentations; opentelemetry-instrumentation-openai-agents-v2 takes true)"
)
_CAPTURE_PYDANTIC_AI: Final = "Pydantic AI's InstrumentationSettings(include_content=True)"


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
        if operation == "execute_tool" or raw.name == "running tool":
            return _tool(raw, limits, self.name)
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
        if answer is not None and agents.looks_like_tool_call(answer):
            answer = None
        if operation in _CHAT_OPERATIONS:
            _tool_results_in_messages(part, attrs, limits)
            if answer is None and _content_left_out(attrs):
                part.no_content = _capture_setting(attrs)
                return part
        if answer is None:
            return part if part.documents is not None else None
        check_text(answer, "answer", limits.max_answer_bytes)
        part.answer = answer
        question = _user_text(attrs.get(_INPUT_MESSAGES))
        if question is not None:
            check_text(question, "question", limits.max_answer_bytes)
            part.question = question
        part.nbytes += len(answer) + len(question or "")
        return part


def _tool(raw: RawSpan, limits: Limits, dialect: str) -> TraceSpan | None:
    attrs = raw.attrs
    name = attrs.get(_TOOL_NAME)
    tool = name if isinstance(name, str) else raw.name.removeprefix("execute_tool ")
    result = next((attrs[k] for k in _TOOL_RESULTS if k in attrs), None)
    if result is None:
        if any(k in attrs for k in _TOOL_ARGUMENTS):
            return None  # the tool returned nothing (or failed)
        part = TraceSpan.of(raw, kind="execute_tool", dialect=dialect)
        part.tool = tool
        part.no_content = _capture_setting(attrs)
        return part
    text = result if isinstance(result, str) else str(result)
    return agents.tool_part(
        raw, dialect=dialect, kind="execute_tool", tool=tool, result=text, limits=limits
    )


def _tool_results_in_messages(part: TraceSpan, attrs: Mapping[str, Any], limits: Limits) -> None:
    """Search tools' results in the chat span's input (``tool_call_response`` parts), for a
    trace whose tools left no span of their own (the assembler prefers tool spans)."""
    docs: list[Passage] = []
    tools: list[str] = []
    for tool, text in agents.messages_tool_results(json_value(attrs.get(_INPUT_MESSAGES))):
        read = agents.tool_documents(tool, text, limits)
        if read is not None:
            docs.extend(read)
            tools.append(tool)
    if tools:
        part.documents = agents.checked(docs, limits)
        part.from_messages = True
        part.tool = ",".join(dict.fromkeys(tools))
        part.nbytes += sum(len(d.text) for d in docs)


def _content_left_out(attrs: Mapping[str, Any]) -> bool:
    """A chat span recorded without its messages, or with text parts stripped of content."""
    if _OUTPUT_MESSAGES not in attrs and _INPUT_MESSAGES not in attrs:
        return True
    messages = json_value(attrs.get(_OUTPUT_MESSAGES))
    if not isinstance(messages, list):
        return False
    return any(
        isinstance(p, dict) and p.get("type") == "text" and "content" not in p
        for m in messages
        if isinstance(m, dict)
        for p in (m.get("parts") or ())
    )


def _capture_setting(attrs: Mapping[str, Any]) -> str:
    """The setting that records content, for the instrumentation that made the span."""
    if any(k.startswith("logfire.") for k in attrs):
        return _CAPTURE_PYDANTIC_AI
    return _CAPTURE_GENAI


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
