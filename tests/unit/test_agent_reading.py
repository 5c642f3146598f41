"""Reading agents (:mod:`citemon._otlp.dialects.agents`, the assembler's choices for them):
which tools are searches, a tool's output unwrapped, tool results against retriever spans and
chat messages, the answer whole, and content capture off. The real frameworks' traces are in
tests/integration/test_agents.py; these are the rules, one at a time."""

from __future__ import annotations

import argparse
import json

import pytest

from citemon._core.errors import ConfigError
from citemon._otlp.assembly import TraceAssembler
from citemon._otlp.decoding import read_spans
from citemon._otlp.dialects.agents import unwrap_tool_output
from citemon._otlp.explanations import explain
from citemon._otlp.settings import AgentSettings
from citemon._otlp.spans import Limits, RawSpan, ResourceInfo, TraceSpan
from citemon._otlp.tool_results import ToolReading, ToolSelection
from citemon._service.settings import Settings
from citemon.cli import build_parser

TRACE = "a" * 32
DOCS = [{"id": "p-1", "text": "Retention is 90 days."}, {"id": "p-2", "text": "Ask support."}]


def raw(
    span: str, name: str, attrs: dict[str, object], *, start: int, end: int, parent: str = "r"
) -> RawSpan:
    return RawSpan(
        resource=ResourceInfo(service="bot"),
        trace_id=TRACE,
        span_id=span,
        parent_span_id=parent,
        name=name,
        start_ns=start,
        end_ns=end,
        error=False,
        dropped_attributes=0,
        attrs=dict(attrs),
    )


def assemble(
    *spans: RawSpan, tools: ToolReading | None = None
) -> tuple[TraceAssembler, list[object]]:
    batch = read_spans(spans, Limits(tools=tools or ToolReading()))
    assert batch.errors == []
    assembler = TraceAssembler(explain=True)
    return assembler, [*assembler.add(batch.spans), *assembler.flush()]


def tool_span(span: str, result: str, *, start: int, end: int, tool: str = "search") -> RawSpan:
    return raw(
        span,
        tool,
        {"openinference.span.kind": "TOOL", "tool.name": tool, "output.value": result},
        start=start,
        end=end,
    )


def llm_span(span: str, text: str | None, *, start: int, end: int) -> RawSpan:
    attrs: dict[str, object] = {"openinference.span.kind": "LLM"}
    if text is None:
        attrs["llm.output_messages.0.message.tool_calls.0.tool_call.function.name"] = "search"
    else:
        attrs["llm.output_messages.0.message.content"] = text
    return raw(span, "llm", attrs, start=start, end=end)


ROOT = raw("r", "agent", {}, start=0, end=100, parent="")


def test_tool_selection() -> None:
    every = ToolSelection.parse("")
    assert every.wants("search") and not every.insists("search") and str(every) == "*"
    assert not every.wants("final_answer")  # an answer, never a search
    only = ToolSelection.parse("search, kb")
    assert only.wants("kb") and only.insists("kb") and not only.wants("weather")
    but = ToolSelection.parse("*,-weather")
    assert but.wants("search") and not but.wants("weather") and str(but) == "*,-weather"
    assert ToolSelection.parse("-weather") == but
    with pytest.raises(ConfigError, match="needs a tool name"):
        ToolSelection.parse("*,-")
    with pytest.raises(ValueError, match="needs a tool name"):
        AgentSettings(retrieval_tools="-")  # the settings refuse it before anything starts


def test_settings_make_a_reading_of_their_own() -> None:
    settings = AgentSettings(
        retrieval_tools="kb", tool_result_reader=r"re:(?P<id>\d+)=(?P<text>\w+)"
    )
    assert settings.reading.selection == ToolSelection.parse("kb")
    assert [(p.id, p.text) for p in settings.reading.read("7=seven") or []] == [("7", "seven")]
    assert AgentSettings().reading == ToolReading()  # another command's settings: untouched
    with pytest.raises(ValueError, match=r"package\.module:factory or re:PATTERN"):
        AgentSettings(tool_result_reader="nope")  # loaded with the settings, before any read
    parser = argparse.ArgumentParser()
    AgentSettings.add_arguments(parser)
    with pytest.raises(ConfigError, match=r"package\.module:factory or re:PATTERN"):
        AgentSettings.from_args(parser.parse_args(["--tool-result-reader", "nope"]))


def test_tool_outputs_unwrapped() -> None:
    message = json.dumps({"type": "tool", "data": {"content": "[p-1] text", "tool_call_id": "c"}})
    assert unwrap_tool_output(message) == "[p-1] text"
    listed = json.dumps({"type": "tool", "data": {"content": DOCS}})
    assert json.loads(unwrap_tool_output(listed)) == DOCS
    llama = json.dumps(
        {"blocks": [{"text": "passage_id: p-1\n\n"}, {"text": "x"}], "tool_name": "s"}
    )
    assert unwrap_tool_output(llama) == "passage_id: p-1\n\nx"
    for plain in ("[p-1] text", json.dumps(DOCS), '{"a": 1}', "{not json"):
        assert unwrap_tool_output(plain) == plain


def test_a_tool_result_is_retrieved_and_a_tool_calling_turn_is_no_answer() -> None:
    assembler, got = assemble(
        llm_span("1", None, start=1, end=2),
        tool_span("2", json.dumps(DOCS), start=3, end=4),
        llm_span("3", "Retention is 90 days. [p-1]", start=5, end=6),
        ROOT,
    )
    (record,) = got
    assert [p.id for p in record.passages] == ["p-1", "p-2"]  # type: ignore[attr-defined]
    assert record.answer == "Retention is 90 days. [p-1]"  # type: ignore[attr-defined]
    assert assembler.completed == 1


def test_a_retriever_inside_the_tool_wins_and_a_retriever_beside_it_does_not() -> None:
    retriever = raw(
        "3",
        "retrieve",
        {
            "openinference.span.kind": "RETRIEVER",
            "retrieval.documents.0.document.id": "p-1",
            "retrieval.documents.0.document.content": "Retention is 90 days.",
        },
        start=4,
        end=5,
    )
    _, got = assemble(
        tool_span("2", json.dumps(DOCS), start=3, end=6),
        retriever,
        llm_span("4", "Retention is 90 days. [p-1]", start=7, end=8),
        ROOT,
    )
    (record,) = got
    assert [p.id for p in record.passages] == ["p-1"]  # type: ignore[attr-defined]
    assert "'retrieve'" in record.origin["passages"]  # type: ignore[attr-defined]
    # A tool that did not contain the retriever's span keeps its own result.
    _, got = assemble(
        tool_span("2", json.dumps(DOCS[1:]), start=1, end=2),
        retriever,
        llm_span("4", "Retention is 90 days. [p-1]", start=7, end=8),
        ROOT,
    )
    (record,) = got
    assert [p.id for p in record.passages] == ["p-2", "p-1"]  # type: ignore[attr-defined]


def test_tools_not_chosen_and_final_answers_are_not_searches() -> None:
    kb = ToolReading(ToolSelection.parse("kb"))
    assembler, got = assemble(
        tool_span("2", json.dumps(DOCS), start=3, end=4),
        tool_span("3", "The answer. [p-1]", start=5, end=6, tool="final_answer"),
        ROOT,
        tools=kb,
    )
    assert got == [] and assembler.no_passages == 1
    (item,) = assembler.take_unanswered()
    assert "tool results that do not read as documents" not in str(explain(item, []))
    # Any tool, by default: one whose result no reader knows is named in the explanation.
    assembler, got = assemble(
        tool_span("2", "It is sunny.", start=3, end=4, tool="weather"),
        tool_span("3", "The answer. [p-1]", start=5, end=6, tool="final_answer"),
        ROOT,
    )
    (item,) = assembler.take_unanswered()
    assert got == [] and item.outcome == "no_passages"
    assert "tool results that do not read as documents: 'weather'; name" in str(explain(item, []))
    # Named, a tool's result is retrieval whatever its shape: one passage, numbered.
    _, got = assemble(
        tool_span("2", "Retention is 90 days.", start=3, end=4, tool="kb"),
        tool_span("3", "The answer. [1]", start=5, end=6, tool="final_answer"),
        ROOT,
        tools=kb,
    )
    (record,) = got
    assert [(p.id, p.text) for p in record.passages] == [("1", "Retention is 90 days.")]  # type: ignore[attr-defined]
    assert record.answer == "The answer. [1]"  # type: ignore[attr-defined]


def test_the_whole_answer_wins_over_one_cut_short_and_a_cut_one_alone_is_truncated() -> None:
    cut = raw(
        "r",
        "agent",
        {"openinference.span.kind": "CHAIN", "output.value": "StopEvent(result='Retention is..."},
        start=0,
        end=100,
        parent="",
    )
    _, got = assemble(
        tool_span("2", json.dumps(DOCS), start=3, end=4),
        llm_span("3", "Retention is 90 days. [p-1]", start=5, end=6),
        cut,
    )
    (record,) = got
    assert record.answer == "Retention is 90 days. [p-1]" and not record.truncated  # type: ignore[attr-defined]
    _, got = assemble(tool_span("2", json.dumps(DOCS), start=3, end=4), cut)
    (record,) = got
    assert record.truncated  # type: ignore[attr-defined]
    assert record.origin["answer"].endswith("(cut short: ends with '...')")  # type: ignore[attr-defined]


@pytest.mark.parametrize("ending", ["...", "…"])
def test_an_answer_trailing_off_in_an_ellipsis_is_whole(ending: str) -> None:
    # Prose may end in an ellipsis; only a repr cut for display (``StopEvent(…``) is a cut.
    trailing = f"Retention is 90 days, and more on Enterprise [p-1]{ending}"
    _, got = assemble(
        tool_span("2", json.dumps(DOCS), start=3, end=4),
        llm_span("3", trailing, start=5, end=6),
        raw("r", "agent", {"openinference.span.kind": "CHAIN"}, start=0, end=100, parent=""),
    )
    (record,) = got
    assert record.answer == trailing and not record.truncated  # type: ignore[attr-defined]
    assert "cut short" not in record.origin["answer"]  # type: ignore[attr-defined]


def genai_chat(
    span: str, inputs: list[object], output: str | None, *, start: int, end: int
) -> RawSpan:
    attrs: dict[str, object] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps(inputs),
    }
    if output is not None:
        attrs["gen_ai.output.messages"] = json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": output}]}]
        )
    return raw(span, "chat", attrs, start=start, end=end)


def response(call: str, docs: list[dict[str, str]]) -> dict[str, object]:
    return {"role": "user", "parts": [{"type": "tool_call_response", "id": call, "result": docs}]}


def test_tool_results_in_chat_messages_count_only_without_a_tool_span() -> None:
    """Each chat span's input holds every earlier result: the latest one is read, once."""
    user = {"role": "user", "parts": [{"type": "text", "content": "How long?"}]}
    second = genai_chat("2", [user, response("c1", DOCS[:1])], None, start=3, end=4)
    last = genai_chat(
        "3",
        [user, response("c1", DOCS[:1]), response("c2", DOCS[1:])],
        "Retention is 90 days. [p-1]",
        start=5,
        end=6,
    )
    _, got = assemble(second, last, ROOT)
    (record,) = got
    assert [p.id for p in record.passages] == ["p-1", "p-2"]  # type: ignore[attr-defined]
    assert record.question == "How long?"  # type: ignore[attr-defined]
    tool = raw(
        "t",
        "execute_tool search",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "search",
            "gen_ai.tool.call.result": json.dumps(DOCS[:1]),
        },
        start=1,
        end=2,
    )
    _, got = assemble(tool, second, last, ROOT)
    (record,) = got
    assert [p.id for p in record.passages] == ["p-1"]  # type: ignore[attr-defined]


def test_content_capture_off_is_its_own_outcome_and_names_the_setting() -> None:
    tool = raw(
        "t",
        "execute_tool search",
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search", "logfire.msg": "x"},
        start=1,
        end=2,
    )
    chat = raw(
        "c",
        "chat",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.output.messages": '[{"role":"assistant","parts":[{"type":"text"}]}]',
        },
        start=3,
        end=4,
    )
    root = raw(
        "r", "invoke_agent", {"gen_ai.operation.name": "invoke_agent"}, start=0, end=9, parent=""
    )
    assembler, got = assemble(tool, chat, root)
    assert got == []
    assert (assembler.no_content, assembler.dropped_incomplete, assembler.unrecognized) == (1, 1, 0)
    assert assembler.outcomes()["no_content"] == 1
    (item,) = assembler.take_unanswered()
    message = str(explain(item, ["execute_tool search", "chat", "invoke_agent"]))
    assert "gave no answer (no_content)" in message
    assert "InstrumentationSettings(include_content=True)" in message
    # A tool that ran with its arguments recorded but returned nothing is not "content off".
    ran = raw(
        "t",
        "execute_tool search",
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.arguments": "{}"},
        start=1,
        end=2,
    )
    assert [s.no_content for s in read_spans([ran, root]).spans] == [""]  # the bare root


def test_a_retriever_without_content_takes_its_text_from_its_output() -> None:
    """The OpenAI Agents SDK's ``tool_span_kinds`` RETRIEVER span: IDs, the text only in
    ``output.value``."""
    span = raw(
        "3",
        "search",
        {
            "openinference.span.kind": "RETRIEVER",
            "retrieval.documents.0.document.id": "p-1",
            "retrieval.documents.1.document.id": "p-2",
            "output.value": json.dumps(DOCS),
        },
        start=1,
        end=2,
    )
    (part,) = read_spans([span]).spans
    assert isinstance(part, TraceSpan) and part.documents is not None
    assert [(d.id, d.text) for d in part.documents] == [(d["id"], d["text"]) for d in DOCS]
    assert not part.truncated


def test_openinference_redacted_values_are_no_text() -> None:
    """``__REDACTED__`` (OpenInference's ``TraceConfig`` hid the value) is never an answer, a
    tool result or a document's text."""
    hidden = raw(
        "4",
        "llm",
        {"openinference.span.kind": "LLM", "output.value": "__REDACTED__"},
        start=5,
        end=6,
    )
    retriever = raw(
        "3",
        "retrieve",
        {
            "openinference.span.kind": "RETRIEVER",
            "retrieval.documents.0.document.id": "p-1",
            "retrieval.documents.0.document.content": "__REDACTED__",
        },
        start=1,
        end=2,
    )
    assembler, got = assemble(
        retriever, tool_span("2", "__REDACTED__", start=3, end=4), hidden, ROOT
    )
    assert got == [] and assembler.no_content == 1
    (item,) = assembler.take_unanswered()
    assert "OPENINFERENCE_HIDE_OUTPUTS=false" in str(explain(item, ["retrieve", "search", "llm"]))
    (docs,) = [p.documents for p in item.parts if p.documents is not None]
    assert [(d.id, d.text) for d in docs] == [("p-1", "")]


def test_a_node_whose_output_is_a_tool_message_is_no_answer() -> None:
    """LangGraph's ``tools`` node outputs the tool's message: without the root (another
    service's, or late) it must not be taken for the answer."""
    node = raw(
        "5",
        "tools",
        {
            "openinference.span.kind": "CHAIN",
            "output.value": json.dumps(
                {"messages": [{"type": "tool", "data": {"content": json.dumps(DOCS)}}]}
            ),
        },
        start=2,
        end=5,
    )
    assert read_spans([node, ROOT]).spans == [read_spans([ROOT]).spans[0]]  # the bare root only


def test_run_reads_with_its_own_settings() -> None:
    """``citemon run``'s settings carry their agents part (``settings.agents``); intake hands
    its reading to the decoder, so a monitor built in-process reads as its settings say."""
    args = build_parser().parse_args(["run", "--retrieval-tools", "kb"])
    assert Settings.from_args(args).agents.reading.selection == ToolSelection.parse("kb")
    assert Settings().agents.reading == ToolReading()  # unaffected by the other one
