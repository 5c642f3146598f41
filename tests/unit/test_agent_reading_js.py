"""Reading agents' traces as the JavaScript instrumentations record them: OpenInference's
LangChain.js serialisation of a tool's output, and its clocks (a span starts at LangChain's
millisecond ``Date.now()`` and ends on the high-resolution clock); the Vercel AI SDK's spans
with content capture off, and its tools' results. The real traces are in
tests/integration/test_agents_js.py; these are the rules, one at a time."""

from __future__ import annotations

import json

from citemon._otlp.dialects.agents import unwrap_tool_output
from citemon._otlp.dialects.vercel import Vercel
from citemon._otlp.spans import Limits, TraceSpan
from tests.unit.test_agent_reading import ROOT, assemble, llm_span, raw, tool_span

TEXT = "[p-3310] Audit log retention is 90 days.\n\n[p-3312] Enterprise terms may differ."


def js_tool_output(content: object) -> str:
    """``output.value`` of a LangChain.js ``TOOL`` span (OpenInference 4.1.1, @langchain/core
    1.4.0), the tool's return value in a serialised ``ToolMessage``."""
    message = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain_core", "messages", "ToolMessage"],
        "kwargs": {
            "status": "success",
            "content": content,
            "tool_call_id": "call-1",
            "name": "search_docs",
            "additional_kwargs": {},
            "response_metadata": {},
        },
    }
    return json.dumps({"output": message})


def test_langchain_js_tool_messages_are_unwrapped() -> None:
    assert unwrap_tool_output(js_tool_output(TEXT)) == TEXT
    blocks = [{"type": "text", "text": TEXT[:20]}, {"type": "text", "text": TEXT[20:]}]
    assert unwrap_tool_output(js_tool_output(blocks)) == TEXT
    # Another message type, or a wrapper with more than the output, is left as it is.
    other = json.loads(js_tool_output(TEXT))
    other["output"]["id"][-1] = "AIMessage"
    assert unwrap_tool_output(json.dumps(other)) == json.dumps(other)
    wider = json.dumps({"output": json.loads(js_tool_output(TEXT))["output"], "x": 1})
    assert unwrap_tool_output(wider) == wider


def test_a_plain_langchain_js_tool_is_a_search() -> None:
    """A LangGraph.js tool that renders the documents itself (no retriever span): its
    ``ToolMessage`` content is the retrieval."""
    (record,) = assemble(
        tool_span("2", js_tool_output(TEXT), start=3, end=6, tool="search_docs"),
        llm_span("4", "Retention is 90 days. [p-3310]", start=7, end=8),
        ROOT,
    )[1]
    assert [p.id for p in record.passages] == ["p-3310", "p-3312"]  # type: ignore[attr-defined]


def test_a_retriever_that_seems_to_start_after_its_tool_ended_is_still_inside_it() -> None:
    """Measured (tests/js): the tool span 542.000–542.717 ms, its retriever child 543.000–
    543.213 ms. The parent link says the retriever is inside; its documents win, once."""
    ms = 1_000_000
    tool = tool_span("2", js_tool_output(TEXT), start=542 * ms, end=542 * ms + 717_297)
    retriever = raw(
        "3",
        "KnowledgeBase",
        {
            "openinference.span.kind": "RETRIEVER",
            "retrieval.documents.0.document.content": "Audit log retention is 90 days.",
            "retrieval.documents.0.document.metadata": '{"passage_id": "p-3310"}',
        },
        start=543 * ms,
        end=543 * ms + 213_359,
        parent="2",
    )
    answer = llm_span("4", "Retention is 90 days. [p-3310]", start=545 * ms, end=546 * ms)
    root = raw("r", "agent", {}, start=500 * ms, end=600 * ms, parent="")
    (record,) = assemble(tool, retriever, answer, root)[1]
    assert len(record.passages) == 1  # type: ignore[attr-defined]
    assert "'KnowledgeBase'" in record.origin["passages"]  # type: ignore[attr-defined]
    assert "'search_docs'" not in record.origin["passages"]  # type: ignore[attr-defined]


def vercel(span: str, operation: str, attrs: dict[str, object], *, error: bool = False) -> object:
    """What the Vercel dialect reads from one span of the SDK's (``ai.operationId``)."""
    r = raw(span, operation, {"ai.operationId": operation, **attrs}, start=1, end=2)
    r.error = error
    return Vercel().read_span(r, Limits())


def test_vercel_content_off_is_told_from_a_call_that_ended_calling_a_tool() -> None:
    """No ``ai.response.text``: capture off, unless the final step called a tool (its calls are
    recorded then) or the call failed."""
    off = vercel("1", "ai.generateText", {"ai.response.finishReason": "stop"})
    assert isinstance(off, TraceSpan) and off.answer is None
    assert "recordOutputs" in off.no_content
    still_calling = {"ai.response.finishReason": "tool-calls", "ai.response.toolCalls": "[]"}
    assert vercel("1", "ai.generateText", still_calling) is None
    assert vercel("1", "ai.streamText", {"ai.response.finishReason": "error"}, error=True) is None
    assert vercel("1", "ai.generateText.doGenerate", {"ai.response.text": "Let me look."}) is None


def test_vercel_tool_calls_without_results() -> None:
    """A tool span with neither arguments nor result was recorded with capture off; one with
    arguments and no result returned nothing (``undefined``) or failed."""
    off = vercel("2", "ai.toolCall", {"ai.toolCall.name": "search_docs"})
    assert isinstance(off, TraceSpan) and off.tool == "search_docs" and off.no_content
    assert vercel("2", "ai.toolCall", {"ai.toolCall.args": "{}"}) is None
    assert vercel("2", "ai.toolCall", {}, error=True) is None


def test_vercel_tool_results_rendered_as_text_are_read() -> None:
    """``JSON.stringify`` of a string the tool rendered: read as the text the model saw."""
    part = vercel("2", "ai.toolCall", {"ai.toolCall.result": json.dumps(TEXT)})
    assert isinstance(part, TraceSpan) and part.documents is not None
    assert [p.id for p in part.documents] == ["p-3310", "p-3312"]
    weather = vercel("2", "ai.toolCall", {"ai.toolCall.result": json.dumps("Sunny, 21 °C")})
    # Not documents, not a search: a part with neither, kept so an unread trace can name it.
    assert isinstance(weather, TraceSpan) and weather.documents is None and weather.answer is None


def test_a_tool_name_with_a_terminal_escape_is_shown_escaped() -> None:
    # The Vercel dialect names a tool call's part "tool NAME" (its span's name is ai.toolCall
    # for every tool); the name comes from the trace, and explanations print the part.
    from citemon._otlp.assembly import describe
    from citemon._otlp.spans import ResourceInfo, TraceSpan

    part = TraceSpan(
        trace_id="t" * 32,
        span_id="s" * 16,
        parent_span_id="",
        kind="tool search\x1b[2J",
        start_ns=0,
        end_ns=1,
        resource=ResourceInfo(),
        name="ai.toolCall",
        dialect="vercel",
    )
    shown = describe(part)
    assert "\x1b" not in shown and "(vercel tool search\\x1b[2J)" in shown
