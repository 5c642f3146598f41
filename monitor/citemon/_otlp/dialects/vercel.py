"""The Vercel AI SDK's telemetry (``experimental_telemetry: {isEnabled: true}``), read from
traces made by ``ai`` 6 (tests/js; ``ai`` 5 records the same). Every span carries
``ai.operationId``:

* ``ai.toolCall`` — one per tool call the SDK executes: ``ai.toolCall.name``, ``ai.toolCall.args``
  and the tool's return value JSON-encoded in ``ai.toolCall.result``; a search tool's result is
  the answer's retrieved passages (:func:`~citemon._otlp.dialects.agents.tool_part`:
  ``--retrieval-tools`` says which tools search);
* ``ai.generateText`` / ``ai.streamText`` — the call as a whole: ``ai.prompt`` (JSON
  ``{"prompt": …}`` or ``{"system", "messages"}``) and, in ``ai.response.text``, the text of the
  final step: the answer;
* ``ai.generateText.doGenerate`` / ``ai.streamText.doStream`` — one per model turn, the turns
  that only call a tool included (their ``ai.response.text`` is empty, or what the model said
  beside the call): never the answer.

With ``recordInputs: false`` / ``recordOutputs: false`` the SDK leaves out the prompt, the tool
arguments and results and the response text, and keeps the rest (names, IDs, finish reasons,
usage): a tool call or a call that finished with no recorded output says so (``no_content``).
"""

from __future__ import annotations

import json
from typing import Any, Final

from citemon._otlp.dialects import agents
from citemon._otlp.dialects.base import SpanReading
from citemon._otlp.dialects.values import check_text
from citemon._otlp.spans import Limits, RawSpan, TraceSpan

__all__ = ["Vercel"]

_OPERATION: Final = "ai.operationId"
_TOOL_CALL: Final = "ai.toolCall"
_TOOL_NAME: Final = "ai.toolCall.name"
_TOOL_RESULT: Final = "ai.toolCall.result"
_CALLS: Final = frozenset({"ai.generateText", "ai.streamText"})
"""The top-level calls: their ``ai.response.text`` is the final step's text."""
_RESPONSE_TEXT: Final = "ai.response.text"
_FINISH_REASON: Final = "ai.response.finishReason"
_TOOL_CALLS: Final = "ai.response.toolCalls"
_TOOL_ARGS: Final = "ai.toolCall.args"
_PROMPT: Final = "ai.prompt"
_CAPTURE: Final = (
    "the Vercel AI SDK's experimental_telemetry recordInputs and recordOutputs "
    "(true, their default)"
)


class Vercel:
    """Vercel AI SDK spans (any span with ``ai.operationId``)."""

    name: Final = "vercel"
    looks_for: Final = (
        "ai.toolCall.result of an ai.toolCall span (a search tool's documents)",
        "ai.response.text of the ai.generateText or ai.streamText span",
    )

    def read_span(self, raw: RawSpan, limits: Limits) -> SpanReading:
        attrs = raw.attrs
        operation = attrs.get(_OPERATION)
        if operation == _TOOL_CALL:
            return _tool_call(raw, limits)
        if operation not in _CALLS:
            return None  # a model turn (doGenerate, doStream), an embedding, …: not the answer
        part = TraceSpan.of(raw, kind=str(operation)[3:], dialect=self.name)
        answer = attrs.get(_RESPONSE_TEXT)
        if not isinstance(answer, str):
            if _FINISH_REASON in attrs and _TOOL_CALLS not in attrs and not raw.error:
                # It finished, and neither its text nor its tool calls were recorded (a final
                # step that calls a tool has ``ai.response.toolCalls``, and no text).
                part.no_content = _CAPTURE
                return part
            return None
        check_text(answer, "answer", limits.max_answer_bytes)
        part.answer = answer
        part.question = _question(attrs.get(_PROMPT))
        if part.question is not None:
            check_text(part.question, "question", limits.max_answer_bytes)
        part.nbytes += len(answer) + len(part.question or "")
        return part


def _tool_call(raw: RawSpan, limits: Limits) -> TraceSpan | None:
    name = raw.attrs.get(_TOOL_NAME)
    tool = name if isinstance(name, str) else ""
    kind = f"tool {tool}".rstrip()  # the span's name is ai.toolCall for every tool: say which
    result = raw.attrs.get(_TOOL_RESULT)
    if not isinstance(result, str):
        if raw.error or result is not None or _TOOL_ARGS in raw.attrs:
            return None  # the tool failed, or returned nothing (``undefined``)
        part = TraceSpan.of(raw, kind=kind, dialect="vercel")
        part.tool = tool
        part.no_content = _CAPTURE
        return part
    return agents.tool_part(
        raw, dialect="vercel", kind=kind, tool=tool, result=_returned(result), limits=limits
    )


def _returned(result: str) -> str:
    """What ``execute`` returned, as the model read it: the SDK records ``JSON.stringify`` of
    it, so a tool that renders its documents as text (``[p-3310] …`` blocks) arrives as a JSON
    string literal; objects and arrays stay JSON for the readers."""
    if not result.startswith('"'):
        return result
    try:
        text = json.loads(result)
    except (json.JSONDecodeError, RecursionError):
        return result
    return text if isinstance(text, str) else result


def _question(value: Any) -> str | None:
    """The user's question in ``ai.prompt``: ``{"prompt": "…"}``, or the last user message of
    ``{"messages": […]}`` (or of a ``prompt`` that is a message list), its text parts joined."""
    if not isinstance(value, str):
        return None
    try:
        prompt = json.loads(value)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(prompt, dict):
        return None
    messages = prompt.get("prompt")
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list):
        messages = prompt.get("messages")
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            texts = [
                p["text"]
                for p in content
                if isinstance(p, dict)
                and p.get("type") == "text"
                and isinstance(p.get("text"), str)
            ]
            return "".join(texts) if texts else None
        return None
    return None
