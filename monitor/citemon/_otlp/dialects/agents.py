"""Agents: the passages an agent's search tool returned, and its final answer (docs/dialects.md,
"Agents").

The dialects call into this module for the spans that record a tool call (an OpenInference
``TOOL`` span, a GenAI ``execute_tool`` span, a ``tool_call_response`` part of a chat span's
input messages). A tool's result is read, and a tool chosen as a search tool
(``--retrieval-tools``), as the :class:`~citemon._otlp.tool_results.ToolReading` handed in with
each span says (:attr:`Limits.tools <citemon._otlp.spans.Limits.tools>`: the command's settings,
never process-wide). A final-answer tool (smolagents' ``final_answer``) carries the answer
instead.
"""

from __future__ import annotations

import json
from typing import Any

from citemon._core.errors import DecodeError
from citemon._core.records import Passage
from citemon._otlp.dialects.values import check_context, check_text
from citemon._otlp.spans import Limits, RawSpan, TraceSpan
from citemon._otlp.tool_results import FINAL_ANSWER_TOOLS, ToolReading

__all__ = [
    "checked",
    "fill_missing_text",
    "is_final_answer_tool",
    "looks_like_tool_call",
    "messages_tool_results",
    "tool_documents",
    "tool_part",
    "unwrap_tool_output",
]


def is_final_answer_tool(tool: str) -> bool:
    return tool in FINAL_ANSWER_TOOLS


def unwrap_tool_output(value: str) -> str:
    """The tool's own result inside what an instrumentation recorded: LangChain's serialised
    ``ToolMessage`` (``{"type": "tool", "data": {"content": …}}``; LangChain.js's
    ``{"output": {"lc": 1, "id": [… "ToolMessage"], "kwargs": {"content": …}}}``), LlamaIndex's
    ``ToolOutput`` (``{"blocks": [{"text": …}], "tool_name": …}``); else ``value`` itself."""
    s = value.lstrip()
    if not s.startswith("{"):
        return value
    try:
        obj = json.loads(s)
    except (json.JSONDecodeError, RecursionError):
        return value
    if not isinstance(obj, dict):
        return value
    inner: Any = None
    if len(obj) == 1 and isinstance(obj.get("output"), dict):
        obj = obj["output"]  # OpenInference's LangChain.js instrumentation wraps the tool's output
    lc_id = obj.get("id")
    if (
        obj.get("lc") == 1
        and isinstance(lc_id, list)
        and lc_id[-1:] == ["ToolMessage"]
        and isinstance(obj.get("kwargs"), dict)
    ):
        inner = obj["kwargs"].get("content")
        if isinstance(inner, list):  # content blocks: the text ones, as the model reads them
            texts = [b.get("text") for b in inner if isinstance(b, dict)]
            inner = "".join(t for t in texts if isinstance(t, str)) if texts else inner
    elif obj.get("type") == "tool" and isinstance(obj.get("data"), dict):
        inner = obj["data"].get("content")
    elif "tool_name" in obj and isinstance(obj.get("blocks"), list):
        texts = [b.get("text") for b in obj["blocks"] if isinstance(b, dict)]
        inner = "".join(t for t in texts if isinstance(t, str)) if texts else obj.get("content")
    if isinstance(inner, str):
        return inner
    if inner is not None:
        return json.dumps(inner)
    return value


def checked(docs: list[Passage], limits: Limits) -> list[Passage]:
    """``docs`` within the limits (else ``too_many_passages`` / ``answer_too_large``)."""
    if len(docs) > limits.max_passages:
        raise DecodeError("too_many_passages", f"{len(docs)} documents > {limits.max_passages}")
    check_context(docs, limits.max_context_bytes)
    for d in docs:
        check_text(d.text, "document")
    return docs


def tool_part(
    raw: RawSpan, *, dialect: str, kind: str, tool: str, result: str, limits: Limits
) -> TraceSpan | None:
    """A tool call's span as a trace part: its result's passages when ``tool`` is a search tool
    and the result reads as documents (:func:`~citemon._otlp.tool_results.read_tool_result`);
    the answer when ``tool`` is a final-answer tool; a part with neither when the result does
    not read as documents (kept so that a trace without passages can say which tools it
    saw); ``None`` for a tool left out by ``--retrieval-tools``."""
    part = TraceSpan.of(raw, kind=kind, dialect=dialect)
    part.tool = tool
    if is_final_answer_tool(tool):
        check_text(result, "answer", limits.max_answer_bytes)
        part.answer = result
        part.nbytes += len(result)
        return part
    docs = tool_documents(tool, result, limits)
    if docs is None:
        return part if limits.tools.selection.wants(tool) else None
    part.documents = checked(docs, limits)
    part.nbytes += sum(len(d.text) for d in docs)
    return part


def tool_documents(tool: str, result: str, limits: Limits) -> list[Passage] | None:
    """The passages of one search tool's result, or ``None`` when ``tool`` is not a search tool
    or its result does not read as documents (a named tool's result is then one passage)."""
    tools = limits.tools
    if not tools.selection.wants(tool) or len(result) > limits.max_context_bytes:
        return None
    docs = tools.read(result)
    if docs is None:
        if not tools.selection.insists(tool) or not result.strip():
            return None
        docs = [Passage(id="", text=result.strip())]
    return docs


def looks_like_tool_call(text: str) -> bool:
    """A model turn that only calls tools, printed as text by an instrumentation
    (opentelemetry-instrumentation-openai-agents-v2 records ``str()`` of the message)."""
    s = text.lstrip()
    return s.startswith("{'content': None") and "'tool_calls': [" in s


def fill_missing_text(docs: list[Passage], result: str, tools: ToolReading) -> bool:
    """Give documents that came without text the text their span's output has under the same
    ID (the OpenAI Agents SDK's ``tool_span_kinds`` RETRIEVER span records IDs, and the text
    only in ``output.value``), read as ``tools`` read results. Returns whether every document
    now has text."""
    found = tools.read(result)
    if found:
        by_id = {p.id: p.text for p in found if p.id and p.text}
        for d in docs:
            if not d.text and d.id in by_id:
                d.text = by_id[d.id]
    return all(d.text for d in docs)


def messages_tool_results(messages: Any) -> list[tuple[str, str]]:
    """``(tool name, result text)`` of every ``tool_call_response`` part in GenAI input
    messages (``[{role, parts: [{type: "tool_call_response", name?, response|result}]}]``),
    in order."""
    out: list[tuple[str, str]] = []
    if not isinstance(messages, list):
        return out
    for message in messages:
        parts = message.get("parts") if isinstance(message, dict) else None
        if not isinstance(parts, list):
            continue
        for p in parts:
            if not isinstance(p, dict) or p.get("type") != "tool_call_response":
                continue
            value = p.get("response", p.get("result"))
            if value is None:
                continue
            name = p.get("name")
            text = value if isinstance(value, str) else json.dumps(value)
            out.append((name if isinstance(name, str) else "", text))
    return out
